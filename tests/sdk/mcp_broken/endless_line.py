"""An MCP server that answers its first message with a line that never ends, then waits."""
import sys
import time

sys.stdin.buffer.readline()
sys.stdout.buffer.write(b'{"jsonrpc":"2.0","id":1,"result":{"text":"' + b"x" * 5000)
sys.stdout.buffer.flush()
time.sleep(60)
