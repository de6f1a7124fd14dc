{
  "targets": [
    {
      "target_name": "socket_ops",
      "sources": ["src/net/native/socket_ops.c", "src/net/native/relay_thread.c"]
    },
    {
      "target_name": "vm_ops",
      "sources": ["src/vm/native/vm_ops.c"]
    }
  ]
}
