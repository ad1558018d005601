"""Test support: emulators and fixtures shared by test modules."""
