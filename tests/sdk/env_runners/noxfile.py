"""A nox project: one session in the running Python, one in a virtualenv of nox's own whose
SDKs come from the outer test's venv (SDK_SITE), so that no package index is needed."""
import os
import sys

import nox


def prompt(session):
    return session.posargs or ["Hello from a runner"]


@nox.session(venv_backend="none")
def here(session):
    session.run(sys.executable, "chat.py", *prompt(session), external=True)


@nox.session(venv_backend="virtualenv")
def venv(session):
    session.run("python", "chat.py", *prompt(session), env={"PYTHONPATH": os.environ["SDK_SITE"]})
