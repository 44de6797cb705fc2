"""Hybrid search: the keyword and vector legs, their fusion, and reranking."""
