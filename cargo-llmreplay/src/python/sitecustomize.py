"""Put first on PYTHONPATH by `cargo llmreplay run`, from its run's own folder: gives each
unittest TestCase method its own test id (`TestCase.id()`), announced to the run's daemon and
named in the requests its clients send (see _llmreplay_identity beside it). It imports the
sitecustomize it hides, if there is one, first; without the daemon in the environment it does
nothing more.
"""

import os
import sys


def _chain():
    here = os.path.dirname(os.path.abspath(__file__))
    this = sys.modules.pop("sitecustomize")
    path = sys.path[:]
    sys.path[:] = [p for p in path if os.path.abspath(p or os.curdir) != here]
    try:
        import sitecustomize  # noqa: F401  (the one this file hides)
    except ImportError as e:
        if e.name != "sitecustomize":
            raise
    finally:
        sys.path[:] = path
        # `import sitecustomize` ends on what sys.modules holds: the hidden one, else this.
        sys.modules.setdefault("sitecustomize", this)


_chain()

if os.environ.get("LLMREPLAY_BASE_URL"):
    import _llmreplay_identity

    _llmreplay_identity.hook_unittest()
