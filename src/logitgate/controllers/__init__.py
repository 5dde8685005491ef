"""Controllers: programs that steer generation token by token (the AICI model).

``protocol`` defines the four calls (``init_prompt``, ``pre_process``, ``mid_process``,
``post_process``), their results and the host a controller talks to; ``runner`` drives
controllers and their forks with a model; ``scripting`` is the high-level async API of AICI's
pyctrl (importable as ``pyaici.server``).
"""
from .protocol import (
    Continue, Controller, ControllerError, ControllerHost, ControllerStartError, Fork, MidResult, PostResult, PreResult, SampleWithBias,
    Splice, Stop, Suspend, VariableStore,
)
from .runner import Limits, RunResult, SequenceResult, run_controller

__all__ = [
    "Continue", "Stop", "Suspend", "Fork", "SampleWithBias", "Splice", "PreResult", "MidResult", "PostResult",
    "Controller", "ControllerHost", "ControllerError", "ControllerStartError", "VariableStore",
    "Limits", "RunResult", "SequenceResult", "run_controller",
]
