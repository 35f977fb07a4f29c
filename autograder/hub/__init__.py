"""The course on a local JupyterHub (`make hub`, docs/jupyterhub.md): a demo and the browser test's hub.

    prepare.py             the term's folder: the instructor's and the students' system accounts from a
                           roster, the instructor's copy of the course (its dates, the gradebook's due
                           date, the variant secret and the roster recorded), nbgrader's exchange (root's,
                           sticky, world-writable; the course's folder in it the instructor's), the students'
                           and instructor's Jupyter configuration, the student-lib (all of the course a
                           student's server imports) and the checkout closed to every other account but
                           its .venv
    jupyterhub_config.py   the hub itself, read by `jupyterhub -f` (the settings prepare.py wrote)
    exchange.py            nbgrader's fetch, then the student's variant.json from the hub's `checks`
                           service: it runs in the student's own server, as the student
    proxy/                 configurable-http-proxy, pinned (package.json, package-lock.json; `npm ci`)
    __main__.py            `python -m autograder.hub`: prepare, then run the hub until Ctrl-C

The hub spawns every user's JupyterLab as that user's own system account (LocalProcessSpawner, as root),
so the exchange's permissions are nbgrader's real ones; the demo's authenticator is a shared password
(JupyterHub's SharedPasswordAuthenticator): a real deployment plugs in its own.
"""
