"""Load lane fixtures: the reliability suite's log-record hygiene and the service suite's tiny server."""

from tests.reliability.conftest import tracebacks_as_text  # noqa: F401 (autouse fixture, registered by import)
from tests.service.conftest import tiny_server  # noqa: F401 (fixture, registered by import)
