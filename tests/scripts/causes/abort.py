"""Dies of SIGABRT (as a C++ ``std::terminate`` does), after a harmless Python warning."""
import os
import warnings

warnings.warn("this warning has nothing to do with the crash")
print("step 1", flush=True)
os.abort()
