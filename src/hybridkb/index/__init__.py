"""Derived in-memory search indexes, rebuilt from the database tables on demand."""
