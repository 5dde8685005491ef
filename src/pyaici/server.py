"""AICI's pyctrl scripting API (``import pyaici.server as aici``), implemented by
``logitgate.controllers.scripting``: see that module for the script model, the constraints, forks
and what is not supported.

This module re-exports the API. A script run by logitgate gets its own instance of this module
(so ``aici.log_level`` is per script); outside a script, the functions work inside
``logitgate.controllers.scripting.host_context(host)``, and ``log_level`` here is the default
for new scripts.
"""
import sys as _sys

from logitgate.controllers import scripting as _scripting
from logitgate.controllers.scripting import *  # noqa: F401,F403
from logitgate.controllers.scripting import API as _API

__all__ = list(_API)

_sys.modules[__name__].__class__ = _scripting._ApiModule
