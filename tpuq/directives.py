"""`#TPUQ` directives: submit options written at the top of a job's script, as SLURM's
`#SBATCH` lines.

    #!/bin/bash
    #TPUQ --chips 1 --time 2h
    #TPUQ --name sweep --notify end

They are read from the top of the script down to its first line that is neither blank
nor a comment (a shebang and other comments may come between). Options given on the
command line, or through their environment variables, win over a directive; `tpuq show`
says where each option came from. Stdlib only: the CLI reads them before any connection.
"""

from __future__ import annotations

import os

from tpuq.spec import SpecError

PREFIX = "#TPUQ"
MAX_READ = 64 * 1024  # directives sit at the top: a big script is not read whole
SHELLS = ("bash", "sh", "zsh", "dash", "ksh", "python", "python3")


def script_of(command: list[str] | tuple[str, ...]) -> str | None:
    """The script a submitted command runs, whose directives count: the `.py` file or
    path given first, or the file a shell or python is given (`-- bash run.sh`)."""
    if not command:
        return None
    first = command[0]
    if first.endswith(".py") or os.sep in first:
        return first if os.path.isfile(first) else None
    if os.path.basename(first) in SHELLS and len(command) > 1 and \
            not command[1].startswith("-") and os.path.isfile(command[1]):
        return command[1]
    return None


def read(path: str) -> list[tuple[int, list[str]]]:
    """(line number, words) of each directive at the top of `path`; SpecError for a
    line that does not split as a shell would."""
    try:
        with open(path, "rb") as f:
            head = f.read(MAX_READ)
    except OSError:
        return []
    return parse(head.decode(errors="replace"), path)


def parse(text: str, where: str = "the script") -> list[tuple[int, list[str]]]:
    out: list[tuple[int, list[str]]] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        if not line.startswith("#"):
            break  # the first line of code: directives end here (SLURM's rule)
        if line[:len(PREFIX)] != PREFIX or (len(line) > len(PREFIX)
                                           and not line[len(PREFIX)].isspace()):
            continue  # any other comment (#TPUQX, # TPUQ) is only a comment
        import shlex

        try:
            words = shlex.split(line[len(PREFIX):], comments=True)
        except ValueError as e:
            raise SpecError(f"{where} line {number}: {PREFIX} {e}") from None
        if words:
            out.append((number, words))
    return out


def words_of(found: list[tuple[int, list[str]]]) -> list[str]:
    return [w for _, words in found for w in words]
