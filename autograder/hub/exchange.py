"""nbgrader's fetch on the course's hub, with the student's own numbers: it runs in the student's server.

    c.ExchangeFactory.fetch_assignment = "autograder.hub.exchange.FetchWithVariant"
    c.FetchWithVariant.service_url = "https://hub.example.edu/services/checks/"

After nbgrader's own fetch has copied the released notebooks, the student's variant.json is asked of the
hub's `checks` service with the server's own hub token (JUPYTERHUB_API_TOKEN), so the service, not this
process, says whose numbers they are, and written beside the notebooks. An assignment without variants
has none (the service refuses with a 404 and its one line; a 404 that is not the service's fails). Where
the service cannot give it, the fetched folder is removed again (a later fetch starts over) and the fetch
fails with one line: a notebook on nobody's numbers would be graded on the student's.
"""

import os
import shutil
from pathlib import Path

from nbgrader.exchange.default.fetch_assignment import ExchangeFetchAssignment
from traitlets import Float, Unicode

FILENAME = "variant.json"   # autograder.variants.FILENAME (this module imports nothing of the grader's)


class FetchWithVariant(ExchangeFetchAssignment):

    service_url = Unicode("", help="The hub's `checks` service, as the student's server reaches it").tag(config=True)
    timeout = Float(30.0, help="Seconds to wait for the service's answer").tag(config=True)

    def copy_files(self):
        super().copy_files()
        try:
            text = self.variant_text()
        except RuntimeError as error:
            shutil.rmtree(self.dest_path, ignore_errors=True)
            self.fail(f"{self.coursedir.assignment_id} was not fetched: {error}")
        if text is not None:
            path = Path(self.dest_path) / FILENAME
            path.write_text(text, encoding="utf-8")
            self.log.info("Your own numbers: %s", path)

    def variant_text(self):
        """variant.json's text for the student of this server's token; None where the assignment has none."""
        import httpx

        token = os.environ.get("JUPYTERHUB_API_TOKEN", "")
        if not self.service_url or not token:
            raise RuntimeError("this server is not a hub's (no checks service or hub token): ask your instructor "
                               "for your variant.json")
        url = f"{self.service_url.rstrip('/')}/variant/{self.coursedir.assignment_id}"
        try:
            response = httpx.get(url, headers={"Authorization": f"token {token}"}, timeout=self.timeout)
        except httpx.HTTPError as error:
            raise RuntimeError(f"the course's checks service could not be reached at {url} ({error}); "
                               "try again in a minute, or tell your instructor") from None
        if response.status_code == 404:   # the service's own refusal (JSON, one line), not a hub without it
            reason = _refusal(response)
            if reason is None:
                raise RuntimeError(f"no checks service answers at {url} (404 from the hub); tell your instructor")
            self.log.info("No variant.json for %s: %s", self.coursedir.assignment_id, reason)
            return None
        if response.status_code != 200:
            said = _refusal(response) or (response.text.strip().splitlines() or [response.reason_phrase])[0]
            raise RuntimeError(f"the course's checks service answered {response.status_code} for your "
                               f"variant.json ({said[:200]}); tell your instructor")
        try:
            numbers = response.json()
        except ValueError:
            numbers = None
        if not isinstance(numbers, dict) or not isinstance(numbers.get("notebooks"), dict):
            raise RuntimeError(f"{url} answered something that is no variant.json; tell your instructor")
        return response.text


def _refusal(response):
    """The check service's one line of a refusal ({"error": ...}), or None where the answer is not one."""
    try:
        error = response.json().get("error")
    except (ValueError, AttributeError):
        return None
    return error if isinstance(error, str) else None
