"""Dies of SIGSEGV in native code with faulthandler on: ``Fatal Python error: Segmentation fault``."""
import ctypes
import faulthandler

faulthandler.enable()


def native_step():
    ctypes.string_at(0)


print("step 1", flush=True)
native_step()
