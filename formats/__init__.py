"""The formats every layer shares: models.yaml candidates, profiles, plans, and the errors and
file I/O they are read and written with. Imports nothing else of polyplan."""
