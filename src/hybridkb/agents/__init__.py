"""The agent front ends: LangChain tools and vector store, and the helpers every front end shares (checking arguments, rendering answers)."""
