"""The payload: what runs on a rented node.

Python >= 3.10 standard library plus torch (imported lazily) only. It never imports benchctl,
store or provisioners, because it is copied to a bare node. The controller may import its pure
modules (``job``, ``presets``, ``stats``) so that one definition serves both sides.
"""

PROTOCOL_VERSION = 1
