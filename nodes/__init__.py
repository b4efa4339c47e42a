"""One module per graph node. Nodes read typed state, ask their agent or the runtime, and
return a partial state update. No CUDA strings are built here."""
