"""nbgrader's fetch on the course's hub, with the student's own numbers: it runs in the student's server.

    c.ExchangeFactory.fetch_assignment = "autograder.hub.exchange.FetchWithVariant"
    c.FetchWithVariant.service_url = "https://hub.example.edu/services/checks/"

After nbgrader's own fetch has copied the released notebooks, the student's variant.json is asked of the
hub's `checks` service with the server's own hub token (JUPYTERHUB_API_TOKEN), so the service, not this
process, says whose numbers they are, and written beside the notebooks. An assignment without variants
has none (the service answers 404). Where the service cannot give it, the fetched folder is removed again
(a later fetch starts over) and the fetch fails with one line: a notebook on nobody's numbers would be
graded on the student's.
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
        if response.status_code == 404:
            return None
        if response.status_code != 200:
            said = response.text.strip().splitlines()[:1] or [response.reason_phrase]
            raise RuntimeError(f"the course's checks service answered {response.status_code} for your "
                               f"variant.json ({said[0][:200]}); tell your instructor")
        return response.text
