"""`kvad synth` for the golden scripts: a tiny checkpoint with the options a golden file records
(preset, seed, std, norm_jitter, dtype), and the sha256 of its weights, which the tests check
before comparing (a changed synth must remake the goldens, not silently pass or fail)."""
import hashlib
import os
import subprocess
import sys


def synth(kvad, arch, opts, out):
    r = subprocess.run([kvad, "synth", "--arch", arch, "--preset", opts["preset"], "--seed", str(opts["seed"]),
                        "--std", str(opts["std"]), "--norm-jitter", str(opts["norm_jitter"]),
                        "--dtype", opts["dtype"], "--out", out], capture_output=True, text=True)
    if r.returncode:
        sys.exit(r.stderr)
    return hashlib.sha256(open(os.path.join(out, "model.safetensors"), "rb").read()).hexdigest()


def args_and_reference(root):
    """--kvad (the binary that synthesises) and --peer (where ref_forward.py lives); returns the
    parsed arguments and the imported reference module."""
    import argparse
    import importlib
    ap = argparse.ArgumentParser()
    ap.add_argument("--kvad", default=os.path.join(root, "build", "kvad"))
    ap.add_argument("--peer", default=os.path.join(os.path.dirname(root), "shared", "peer"))
    a = ap.parse_args()
    sys.path.insert(0, a.peer)
    return a, importlib.import_module("ref_forward")
