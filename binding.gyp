{
  "targets": [
    {
      "target_name": "socket_ops",
      "sources": ["src/net/native/socket_ops.c", "src/net/native/relay_thread.c"]
    }
  ]
}
