"""The proxy to configured upstream servers and the watch beside it: KV events, measured requests and a shadow twin."""
