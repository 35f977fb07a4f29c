"""Have a notebook graded now against the course's hidden tests, as yourself.

    from check import check
    check()                 # the notebook this kernel runs, as last SAVED (save first: Ctrl-S)
    check("masks.ipynb")    # or name it

or, once per session, `%load_ext check`, then `%check` in any cell.  The answer appears under the
cell as Markdown: each hidden test passed or failed, its points and, where the course shows them,
what went wrong and its likely cause.  No hidden test, input or solution is ever sent to you.

Where the server is and who you are come from check-server.json, which your instructor put in your
kit (beside the assignments' folders); never put your token in a notebook.  On the course's JupyterHub,
where there is no such file, the hub says both: your server's own hub token (JUPYTERHUB_API_TOKEN) is
sent, to the hub's `checks` service (hub_service_address).  The course limits how often you may check,
and until when.
"""

import json
import os
import re
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

KIT_FILE = "check-server.json"
HUB_SERVICE = "checks"   # the check service's name on the course's hub (jupyterhub_config.py)


def hub_service_address(environ=None):
    """The hub's check service, as a student's server on a JupyterHub reaches it:

        <the hub's public origin><the hub's base>services/checks/

    the origin from JUPYTERHUB_PUBLIC_HUB_URL (the hub sets it where jupyterhub_config.py gives
    c.JupyterHub.public_url), else JUPYTERHUB_PUBLIC_URL or JUPYTERHUB_HOST; the base is what precedes
    user/<name>/ in the server's JUPYTERHUB_SERVICE_PREFIX (/user/alice/ -> /, /jhub/user/alice/ -> /jhub/).
    ValueError (one line) where the hub told the server no public address."""
    environ = os.environ if environ is None else environ
    public = next((environ[name] for name in ("JUPYTERHUB_PUBLIC_HUB_URL", "JUPYTERHUB_PUBLIC_URL", "JUPYTERHUB_HOST")
                   if "://" in environ.get(name, "")), None)
    if public is None:
        raise ValueError("the hub told this server no public address (JUPYTERHUB_PUBLIC_HUB_URL): ask your instructor "
                         "to set c.JupyterHub.public_url, or for a check-server.json")
    origin = "{0}://{1}".format(*urlsplit(public)[:2])
    found = re.match(r"^(.*?/)user/[^/]+/(?:[^/]+/)?$", environ.get("JUPYTERHUB_SERVICE_PREFIX", ""))
    return f"{origin}{found.group(1) if found else '/'}services/{HUB_SERVICE}/"


def _where(folder):
    """(the server's address, the request's headers, the student id sent): from check-server.json in `folder` or
    above it, else from the hub this server runs on."""
    for place in (folder, *folder.parents):
        if (place / KIT_FILE).is_file():
            kit = json.loads((place / KIT_FILE).read_text())
            return kit["server"], {"Authorization": f"Bearer {kit['token']}"}, kit["student"]
    if os.environ.get("JUPYTERHUB_API_TOKEN"):
        return (hub_service_address(), {"Authorization": f"token {os.environ['JUPYTERHUB_API_TOKEN']}"},
                os.environ.get("JUPYTERHUB_USER", ""))
    raise FileNotFoundError(f"no {KIT_FILE} in {folder} or above it: it comes with your kit from your instructor")


def _this_notebook():
    """The notebook this kernel runs: Jupyter's session name, VS Code's, or the one notebook here."""
    candidates = [os.environ.get("JPY_SESSION_NAME", "")]
    try:
        from IPython import get_ipython
        shell = get_ipython()
        if shell is not None:
            candidates += [shell.user_ns.get("__session__", ""), shell.user_ns.get("__vsc_ipynb_file__", "")]
    except ImportError:
        pass
    for candidate in candidates:
        if candidate and candidate.endswith(".ipynb") and Path(candidate).is_file():
            return Path(candidate)
    here = sorted(Path.cwd().glob("*.ipynb"))
    if len(here) == 1:
        return here[0]
    raise ValueError("say which notebook to check: check(\"<name>.ipynb\")")


def _show(text):
    try:
        from IPython import get_ipython
        from IPython.display import Markdown, display
        if get_ipython() is not None:
            display(Markdown(text))
            return
    except ImportError:
        pass
    print(text)


def check(notebook=None, timeout=600):
    """Post the saved notebook to the course's check server; show its answer; return it (a dict)."""
    import httpx

    path = Path(notebook) if notebook else _this_notebook()
    server, headers, student = _where(path.resolve().parent)
    saved = time.strftime("%H:%M:%S", time.localtime(path.stat().st_mtime))
    request = {"student": student, "assignment": path.resolve().parent.name, "notebook": path.name,
               "content": path.read_text(encoding="utf-8")}
    try:
        response = httpx.post(server.rstrip("/") + "/check", json=request, timeout=timeout, headers=headers)
    except httpx.HTTPError as error:
        _show(f"**The check server could not be reached** ({server}): {error}")
        return {"error": str(error)}
    try:
        answer = response.json()
    except ValueError:
        answer = {"error": response.text.strip()[:300] or response.reason_phrase}
    if response.status_code == 200:
        _show(f"{answer['markdown']}\n(the notebook as saved at {saved})")
    else:
        wait = response.headers.get("Retry-After")
        _show(f"**Check refused** ({response.status_code}): {answer.get('error', '')}"
              + (f" Try again in {wait} s." if wait else ""))
    answer["status"] = response.status_code
    return answer


def load_ipython_extension(ipython):
    """`%load_ext check` registers `%check [notebook.ipynb]`."""
    def magic(line):
        check(line.strip() or None)
    ipython.register_magic_function(magic, "line", "check")


if __name__ == "__main__":
    sys.exit(0 if check(sys.argv[1] if len(sys.argv) > 1 else None).get("status") == 200 else 1)
