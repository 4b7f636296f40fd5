#!/usr/bin/env python3
"""FlashInfer for the peer scripts: the packed copy in .whl/ (bench/peers/flashinfer_pack.sh) when
it exists, else an installed flashinfer, else none.

load() imports flashinfer once per process and returns it, or prints one line saying why not and
returns None, so that a missing or broken FlashInfer skips its peer rows and nothing else. With
.whl/site-packages/flashinfer present (KJIT_FLASHINFER_WHL names another .whl folder), it goes
first on sys.path, and unless already set:

  FLASHINFER_WORKSPACE_BASE  .whl/workspace: FlashInfer's cache and lock files stay in .whl/
  FLASHINFER_CUDA_ARCH_LIST  9.0a: what the packed modules were built for (and no CUDA call at
                             import to ask the device)
  FLASHINFER_DISABLE_JIT     1: a module that is not prebuilt fails at once with FlashInfer's
                             MissingJITCacheError, instead of an nvcc build inside the run's
                             deadline (the pack holds no sources to build from: a module the
                             peers need is added to flashinfer_prebuild.py's specs() and packed)
  FLASHINFER_USE_CUDA_NORM   1: the norms through the prebuilt CUDA module (FlashInfer would pick
                             its CuTe DSL kernels if nvidia-cutlass-dsl were installed)

The prebuilt modules sit in FlashInfer's package-local AOT folder,
.whl/site-packages/flashinfer/data/aot/<name>/<name>.so, which flashinfer.jit.env looks in before
anything else and loads without a version, arch or source check. They are sm_90a code, so with
the packed copy load() also wants a compute capability 9.0 device.

`python3 bench/peers/flashinfer_env.py` prints where flashinfer comes from, its version and, for
each module the peers use (flashinfer_prebuild.py), whether it is prebuilt; --load also loads
every prebuilt .so (tvm_ffi.load_module; a machine without a driver needs a libcuda.so.1 on the
library path for that, see flashinfer_pack.sh); --version prints the version alone, or nothing
(bench/run.py's meta.json)."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
WHL = os.environ.get("KJIT_FLASHINFER_WHL") or os.path.join(ROOT, ".whl")
SITE = os.path.join(WHL, "site-packages")

_state = {}


def packed():
    """True when .whl/ holds a packed flashinfer."""
    return os.path.isdir(os.path.join(SITE, "flashinfer"))


def setup():
    """Puts the packed flashinfer first on sys.path and sets its environment (see the module
    docstring); returns whether a packed copy is used. Idempotent, no import."""
    if not packed():
        return False
    if SITE not in sys.path:
        sys.path.insert(0, SITE)
    os.environ.setdefault("FLASHINFER_WORKSPACE_BASE", os.path.join(WHL, "workspace"))
    os.environ.setdefault("FLASHINFER_CUDA_ARCH_LIST", "9.0a")
    os.environ.setdefault("FLASHINFER_DISABLE_JIT", "1")
    os.environ.setdefault("FLASHINFER_USE_CUDA_NORM", "1")
    os.environ.setdefault("FLASHINFER_LOGGING_LEVEL", "warning")
    return True


def _say(text):
    print(f"flashinfer peer skipped: {text}", flush=True)


def load(need_gpu=True):
    """The flashinfer module, or None after one line saying why (once per process)."""
    if "module" in _state:
        return _state["module"]
    _state["module"] = None
    use_packed = setup()
    try:
        import warnings

        # requests (imported by flashinfer) warns when neither chardet nor charset_normalizer
        # is importable; the pack ships charset_normalizer, an installed flashinfer may not.
        warnings.filterwarnings("ignore", message=".*character detection dependency.*")
        import flashinfer
    except Exception as e:  # not installed, or a dependency missing: no such peer
        where = f" from {SITE}" if use_packed else " (no .whl/: bench/peers/flashinfer_pack.sh)"
        _say(f"import flashinfer{where} failed: {type(e).__name__}: "
             f"{str(e).splitlines()[0] if str(e) else ''}")
        return None
    if need_gpu:
        import torch

        if not torch.cuda.is_available():
            _say("no CUDA device")
            return None
        cap = torch.cuda.get_device_capability()
        if use_packed and cap != (9, 0):
            _say(f"the packed modules are sm_90a, this device is sm_{cap[0]}{cap[1]}")
            return None
    _state["module"] = flashinfer
    _state["packed"] = use_packed
    return flashinfer


def describe():
    """'flashinfer 0.7.2 (.whl/site-packages)' or 'flashinfer 0.7.2 (installed)'; '' if none."""
    fi = _state.get("module")
    if fi is None:
        return ""
    return f"flashinfer {fi.__version__} ({'packed' if _state.get('packed') else 'installed'})"


def version():
    """flashinfer's version as the peers would import it, or '' (for meta.json)."""
    fi = load(need_gpu=False)
    return fi.__version__ if fi is not None else ""


def module_status():
    """[(family, name, path or None)] for the modules the peers use; path when prebuilt."""
    sys.path.insert(0, HERE)
    import flashinfer_prebuild

    out = []
    for family, spec in flashinfer_prebuild.specs():
        out.append((family, spec.name, str(spec.aot_path) if spec.is_aot else None))
    return out


def main(argv):
    if "--version" in argv:  # for meta.json: the version, or nothing
        import contextlib
        import io

        with contextlib.redirect_stdout(io.StringIO()):
            v = version()
        print(v)
        return 0
    fi = load(need_gpu=False)
    if fi is None:
        return 1
    print(f"{describe()} from {os.path.dirname(fi.__file__)}")
    for k in ("FLASHINFER_WORKSPACE_BASE", "FLASHINFER_CUDA_ARCH_LIST", "FLASHINFER_DISABLE_JIT",
              "FLASHINFER_USE_CUDA_NORM"):
        print(f"  {k}={os.environ.get(k, '')}")
    missing = 0
    loader = None
    if "--load" in argv:
        import tvm_ffi

        loader = tvm_ffi.load_module
    for family, name, path in module_status():
        state = "prebuilt" if path else "NOT prebuilt (would JIT-compile)"
        if path and loader is not None:
            try:
                loader(path)
                state += ", loads"
            except Exception as e:
                state += f", LOAD FAILED: {str(e).splitlines()[0]}"
                missing += 1
        missing += path is None
        print(f"  {family:10s} {name}: {state}")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
