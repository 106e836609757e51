"""An MCP server that answers every line with a response that is not UTF-8 (Latin-1 "café")."""
import sys

for line in sys.stdin.buffer:
    sys.stdout.buffer.write(b'{"jsonrpc":"2.0","id":1,"result":{"text":"caf\xe9"}}\n')
    sys.stdout.buffer.flush()
