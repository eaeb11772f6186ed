"""`tpuq web`: the dashboard and `/metrics`, over the same handlers as the CLI.

Imported only by `tpuq web` (Starlette, uvicorn, Jinja2 and prometheus_client are not
loaded by any other command).

- `app.py`      the Starlette application: routes, sign-in gate, errors; serving it
- `site.py`     what every route needs; who is asking, a form once its CSRF token is right
- `auth.py`     who is asking: tokens, PostgreSQL passwords, sessions, CSRF
- `pages.py`    the pages and their live fragments
- `actions.py`  cancel, hold, release, resubmit, drain: the handlers, as the signed-in person
- `live.py`     a job's log as server-sent events
- `data.py`     what each page shows (handler replies) and the pictures' data
- `metrics.py`  the Prometheus collector, read from the database at scrape time
- `tally.py`    running totals over attempts (histograms, preemptions, goodput)
"""
