"""The bundled PostgreSQL (``hybridkb postgres``): its cluster and its private folder."""
