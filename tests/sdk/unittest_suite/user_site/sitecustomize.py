"""A sitecustomize of the user's own, which `cargo llmreplay run`'s must still load."""
import os

out = os.environ.get("SAMPLE_OUT")
if out:
    with open(os.path.join(out, f"user-sitecustomize.txt"), "w") as f:
        f.write("loaded")
