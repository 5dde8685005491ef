"""AICI's ``pyaici`` package name, for pyctrl scripts run by logitgate: ``import pyaici.server as aici``.

Only ``pyaici.server`` is provided (``logitgate.controllers.scripting``); scripts loaded with
``logitgate.controllers.scripting.load_script`` get their own instance of it, and
``pyaici.server_native`` resolves to the same object inside a script.
"""
