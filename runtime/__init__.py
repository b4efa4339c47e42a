"""Everything that touches a GPU or a compiler. Never imports LangGraph."""
