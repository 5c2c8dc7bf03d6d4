"""HTTP: one router module per API family, all thin translations over the domain."""

from mnemos.api.app import create_app

__all__ = ["create_app"]
