"""The HTTP side: transport (socket, proxy, TLS), SSE splitting, chat streaming, error
classification and reachability."""
