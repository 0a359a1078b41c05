"""The formats every layer shares, at the bottom of the layering (imports nothing else of polyplan):
the files the stages exchange (`candidates`, `profile`, `plan`, `validation_report`), the one codec
they are read and written through, and the safe input/output edge. Module by module:
docs/architecture.md, "The rooms".
"""
