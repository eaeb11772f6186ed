#!/usr/bin/env bash
# tpuq TPU VM startup script: installs and (re)starts the tpuq agent as a systemd service.
#
# Use it as the VM's startup script so it runs at every boot:
#   gcloud compute tpus tpu-vm create NAME ... \
#     --metadata-from-file=startup-script=workers/startup-script.sh \
#     --metadata=tpuq-database-url=postgresql://...,tpuq-broker-url=redis://...
# or run it by hand as root. It is idempotent: a second run changes nothing unless an
# input changed, and only then restarts the agent (a restart preempts running jobs).
#
# Inputs (environment first, then instance metadata attribute, then default):
#   TPUQ_PIP_SPEC     / tpuq-pip-spec      what to pip install; default 'tpuq'.
#                                          Pin it (a version, a wheel path or URL, or
#                                          'tpuq @ git+https://...@TAG'). While
#                                          tpuq is not published on PyPI, the default
#                                          fails, or worse installs a stranger's package
#                                          and runs it as root: always set this.
#   TPUQ_DATABASE_URL / tpuq-database-url  PostgreSQL URL; absent = keep the file's value
#   TPUQ_BROKER_URL   / tpuq-broker-url    Redis URL;      absent = keep the file's value
#   TPUQ_HOST         / tpuq-host          host name in the queue; default: see below
#   TPUQ_HOST_PREFIX  / tpuq-host-prefix   host name <prefix>-w<worker> (the fleet
#                                          controller sets it: one name per slot,
#                                          the same for every VM it makes there)
#   TPUQ_VENV_PYTHON                       interpreter for the venv; default python3
#   TPUQ_UPGRADE=1                         reinstall even if TPUQ_PIP_SPEC is unchanged
#   TPUQ_METADATA_URL                      the metadata server; default GCE's own
# The last line says what the run changed ("changes: none" when nothing): `tpuq pod
# setup` reports it per worker.
set -euo pipefail

PREFIX=/opt/tpuq
VENV="$PREFIX/venv"
ENV_DIR=/etc/tpuq
ENV_FILE="$ENV_DIR/agent.env"
UNIT_FILE=/etc/systemd/system/tpuq-agent.service
STATE_HOME=/var/lib/tpuq
META="${TPUQ_METADATA_URL:-http://metadata.google.internal/computeMetadata/v1}"
META="${META%/}"

log() { echo "tpuq-startup: $*" >&2; }

if [[ $(id -u) -ne 0 ]]; then
  log "must run as root (it installs a systemd unit)"
  exit 1
fi

# One metadata value, or nothing. Off GCP, or for an attribute nobody set, the server is
# unreachable or answers 404: both mean "absent", never an error.
meta() {
  curl -fsS --max-time 3 --retry 2 --retry-connrefused \
    -H 'Metadata-Flavor: Google' "$META/$1" 2>/dev/null || true
}

# The environment wins over metadata, so a by-hand run can override anything.
input() {  # input VAR attribute
  local value="${!1:-}"
  if [[ -z $value ]]; then
    value="$(meta "instance/attributes/$2")"
  fi
  printf '%s' "$value"
}

# Current value of KEY in the env file, or nothing.
env_get() {
  [[ -f $ENV_FILE ]] || return 0
  sed -n "s/^$1=//p" "$ENV_FILE" | tail -n 1
}

changed=0   # something the agent reads changed: restart it
changes=()  # what this run did, for the last line
did() { changes+=("$1"); log "$1"; }

# The TPU runtime starts and stops much faster on v5e and later with transparent
# hugepages set to always (jax cloud_tpu_init.py warns without them); the agent warns too.
# For this boot: the startup script runs at every boot.
THP=/sys/kernel/mm/transparent_hugepage/enabled
if [[ -w $THP ]] && ! grep -q '\[always\]' "$THP"; then
  echo always >"$THP" && did "transparent hugepages set to always"
fi

# Replace or append KEY=VALUE, keeping every other line (hand edits survive reboots).
# No sed substitution: URLs carry '&', '/', '@' and passwords anything.
env_set() {  # env_set KEY VALUE
  local key="$1" value="$2" tmp
  [[ "$(env_get "$key")" == "$value" ]] && grep -q "^$key=" "$ENV_FILE" && return 0
  if [[ $value == *$'\n'* ]]; then
    log "refusing a multi-line value for $key"
    exit 1
  fi
  tmp="$(mktemp "$ENV_DIR/.agent.env.XXXXXX")"
  grep -v "^$key=" "$ENV_FILE" >"$tmp" || true
  printf '%s=%s\n' "$key" "$value" >>"$tmp"
  chmod 0600 "$tmp"
  mv -f "$tmp" "$ENV_FILE"
  changed=1
  did "set $key"
}

# ---- 1. the venv ---------------------------------------------------------------------
PIP_SPEC="$(input TPUQ_PIP_SPEC tpuq-pip-spec)"
PIP_SPEC="${PIP_SPEC:-tpuq}"
PYTHON="${TPUQ_VENV_PYTHON:-python3}"
STAMP="$PREFIX/installed-spec"

mkdir -p "$PREFIX"
if [[ ! -x $VENV/bin/python ]]; then
  # Ubuntu's python3 has no ensurepip until python3-venv is installed.
  if ! "$PYTHON" -m venv "$VENV"; then
    did "installed python3-venv"
    rm -rf "$VENV"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv
    "$PYTHON" -m venv "$VENV"
  fi
fi
# Reinstall only when asked or when the spec changed: at every boot this would make the
# agent depend on the package index being up before the host can work.
if [[ ${TPUQ_UPGRADE:-0} == 1 || ! -x $VENV/bin/tpuq || "$(cat "$STAMP" 2>/dev/null)" != "$PIP_SPEC" ]]; then
  did "pip install $PIP_SPEC"
  "$VENV/bin/pip" install --quiet --upgrade pip
  "$VENV/bin/pip" install --quiet --upgrade "$PIP_SPEC"
  printf '%s\n' "$PIP_SPEC" >"$STAMP"
  changed=1
fi

# ---- 2. /etc/tpuq/agent.env ----------------------------------------------------------
install -d -m 0755 "$ENV_DIR"
install -d -m 0755 "$STATE_HOME"
if [[ ! -f $ENV_FILE ]]; then
  install -m 0600 /dev/null "$ENV_FILE"
  echo "# tpuq agent settings; see workers/agent.env.example for every variable." >"$ENV_FILE"
  changed=1
fi

db_url="$(input TPUQ_DATABASE_URL tpuq-database-url)"
broker_url="$(input TPUQ_BROKER_URL tpuq-broker-url)"
[[ -n $db_url ]] && env_set TPUQ_DATABASE_URL "$db_url"
[[ -n $broker_url ]] && env_set TPUQ_BROKER_URL "$broker_url"
if [[ -z "$(env_get TPUQ_DATABASE_URL)" ]]; then
  log "no tpuq-database-url: the agent runs embedded (SQLite under $STATE_HOME)"
fi

# The host name must be stable across reboots, because the restarted agent finds its old
# attempts by host name and requeues them by boot id. An IP changes at maintenance, so:
# explicit tpuq-host > tpuq-host-prefix and the worker number > the name already in the
# file > <TPU node>-w<worker> > instance name.
host="$(input TPUQ_HOST tpuq-host)"
host_prefix="$(input TPUQ_HOST_PREFIX tpuq-host-prefix)"
if [[ -z $host && -n $host_prefix ]]; then
  worker="$(meta instance/attributes/agent-worker-number)"
  host="$host_prefix-w${worker:-0}"
fi
if [[ -z $host ]]; then
  host="$(env_get TPUQ_HOST)"
fi
if [[ -z $host ]]; then
  worker="$(meta instance/attributes/agent-worker-number)"
  # tpu-env is YAML-ish ("NODE_ID: 'name'"); that it carries the node name is unverified,
  # so anything unexpected falls through to the instance name.
  node="$(meta instance/attributes/tpu-env \
    | sed -n "s/^NODE_ID: *'\{0,1\}\([A-Za-z0-9_.-]*\)'\{0,1\} *$/\1/p")"
  if [[ -n $node && $worker =~ ^[0-9]+$ ]]; then
    host="$node-w$worker"
  else
    host="$(meta instance/name)"
  fi
fi
host="${host:-$(hostname -s)}"
env_set TPUQ_HOST "$host"

# Point the agent at the metadata server only where there is one.
if [[ -z "$(env_get TPUQ_METADATA_URL)" && -n "$(meta instance/id)" ]]; then
  env_set TPUQ_METADATA_URL "$META/"
fi
if [[ -z "$(env_get TPUQ_HOME)" ]]; then
  env_set TPUQ_HOME "$STATE_HOME"
fi
# Users' shells find the agent's socket, so `tpuq submit` on this VM goes through the
# agent (tens of ms, and without database credentials); the socket is mode 0666 and the
# agent takes the submitter's user name from the kernel (SO_PEERCRED).
socket_path="$(env_get TPUQ_AGENT_SOCKET)"
socket_path="${socket_path:-$(env_get TPUQ_HOME)/agent.sock}"
profile_line="export TPUQ_AGENT_SOCKET=$socket_path"
if [[ "$(cat /etc/profile.d/tpuq.sh 2>/dev/null)" != "$profile_line" ]]; then
  printf '%s\n' "$profile_line" >/etc/profile.d/tpuq.sh
  did "wrote /etc/profile.d/tpuq.sh"
fi

# ---- 3. the unit -----------------------------------------------------------------------
# A copy of workers/tpuq-agent.service: a startup script arrives alone, without the repo.
unit_tmp="$(mktemp)"
trap 'rm -f "$unit_tmp"' EXIT
cat >"$unit_tmp" <<'UNIT'
# tpuq host agent: one per TPU VM. Installed by workers/startup-script.sh (which embeds
# a copy of this file; tests/unit/test_deploy_kit.py keeps the two identical).
# Install by hand: see workers/README.md.

[Unit]
Description=tpuq host agent (runs queued jobs on this host's TPU chips)
# The agent needs the database and broker at start; plain network.target is only
# "interfaces configured", not "reachable".
Wants=network-online.target
After=network-online.target
# Never stop retrying: a database that is down at boot must not leave the host idle
# for good. RestartSec below keeps the retry rate low.
StartLimitIntervalSec=0

[Service]
Type=exec
EnvironmentFile=/etc/tpuq/agent.env
# systemd does NOT read /etc/environment, so the LD_PRELOAD=libtcmalloc.so.4 that TPU VM
# images put there never reaches the agent. That is on purpose: tpuq adds TCMalloc per
# job, only for TPU jobs and only when the library exists (TPUQ_TCMALLOC_PATH), and keeps
# it away from its own helper programs. Do not add LD_PRELOAD here.
Environment=PYTHONUNBUFFERED=1
ExecStart=/opt/tpuq/venv/bin/tpuq agent

# Who: root, deliberately.
#  - Holder detection reads /proc/<pid>/fd of every process holding /dev/accel* or
#    /dev/vfio/*, including other users' notebooks; that needs CAP_SYS_PTRACE.
#  - Killing orphans of earlier attempts needs CAP_KILL; removing a stale
#    /tmp/libtpu_lockfile owned by another user in sticky /tmp needs CAP_FOWNER.
#  - A dedicated user with AmbientCapabilities=CAP_SYS_PTRACE CAP_KILL CAP_FOWNER looks
#    safer but is not: ambient capabilities survive execve, so every job would inherit
#    them, and ptrace over all processes is root in practice. Root at least says so.
#  - TPU VM users reached through `gcloud ... tpu-vm ssh` already have passwordless sudo.
# Consequence: jobs run as root, unless TPUQ_RUN_AS=owner in the env file: then each job
# runs as its owner's local account (the agent drops privileges for it).
User=root

# Stops and restarts, matching the agent's signal contract (workers/README.md):
#  - KillSignal goes to the agent alone (KillMode=process). On SIGTERM the agent forwards
#    the notice itself: each job's configured stop signal to the job's process group,
#    then that job's grace period, then SIGKILL, then requeue. KillMode=control-group or
#    mixed would SIGTERM (or SIGKILL) the jobs behind the agent's back.
#  - Each job's parent is its keeper, not the agent: after an agent crash (or
#    `systemctl kill --kill-who=main -s SIGUSR2 tpuq-agent`, which hands them over for
#    an upgrade)
#    the keepers and jobs live on and the restarted agent adopts them. A keeper never
#    lets its job outrun its lease: with no agent renewing it, the job is stopped
#    before another host can be given it, so nothing left in the cgroup runs unchecked.
KillSignal=SIGTERM
KillMode=process
SendSIGKILL=yes
# Longer than the largest grace period any job asks for, plus a little for the agent to
# record the requeues. Default grace is 30 s (`tpuq submit --grace`, TPUQ_DEFAULT_GRACE_S);
# 330 s allows a job a 5-minute grace (enough for TPU Autocheckpoint-style saves). A job
# with a longer grace gets SIGKILLed by systemd at this limit.
# Spot/preemptible VMs get about 30 s from ACPI soft-off to hard power-off whatever this
# says: there, jobs must checkpoint often and save within ~20 s of SIGTERM.
TimeoutStopSec=330

# Restart=always, not on-failure: after a crash, an OOM kill, or a clean exit we did not
# ask for, the host must come back to the queue. After a restart the agent requeues the
# attempts it owned (same boot: they were killed with the cgroup; new boot id: reboot).
Restart=always
RestartSec=5
# ...except after exit status 78: the agent found the host unfit (chips tpuq does not
# know, TPU chips without device files: a wrong image) and said what to change in the
# journal. Starting it again changes nothing; a person does, then starts it.
RestartPreventExitStatus=78

# Jobs inherit these limits: data loaders and libtpu open many files, and VFIO-based
# TPUs (v5e, v5p, v6e) pin DMA memory against RLIMIT_MEMLOCK.
LimitNOFILE=1048576
LimitMEMLOCK=infinity

# Deliberately NOT set: PrivateTmp (the agent must see the real /tmp/libtpu_lockfile and
# /tmp/tpu_logs shared with processes outside tpuq), PrivateDevices/DevicePolicy (jobs
# need /dev/accel*, /dev/vfio/*), ProtectProc/ProtectHome/ProtectSystem (holder detection
# and jobs writing to users' checkpoint dirs). Every sandbox option here also applies to
# every job.

[Install]
WantedBy=multi-user.target
UNIT
if ! cmp -s "$unit_tmp" "$UNIT_FILE"; then
  install -m 0644 "$unit_tmp" "$UNIT_FILE"
  changed=1
  did "installed $UNIT_FILE"
fi

# ---- 4. run it -------------------------------------------------------------------------
systemctl daemon-reload
# `enable --now` leaves a running agent alone. When something it reads changed, a running
# agent hands its jobs over to their keepers (SIGUSR2, to the agent alone) and systemd
# starts the new one (Restart=always), which adopts them: the jobs lose nothing.
if [[ $changed == 1 ]] && systemctl is-active --quiet tpuq-agent.service; then
  systemctl enable tpuq-agent.service
  systemctl kill --kill-who=main --signal=SIGUSR2 tpuq-agent.service
  did "restarted tpuq-agent (its jobs handed over)"
else
  if ! systemctl is-active --quiet tpuq-agent.service; then
    did "started tpuq-agent"
  fi
  systemctl enable --now tpuq-agent.service
fi
log "tpuq-agent as $(env_get TPUQ_HOST): $(systemctl is-active tpuq-agent.service || true)"
if [[ ${#changes[@]} -eq 0 ]]; then
  log "changes: none"
else
  (IFS=';' && log "changes: ${changes[*]}")
fi
