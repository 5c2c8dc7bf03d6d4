"""The rules of Mnemos: memories, visibility, pagination. Pure Python: no HTTP, no SQL."""
