"""An MCP server that cannot start: it says why on stderr and exits 3 before reading anything."""
import sys

print("starting the weather server", file=sys.stderr)
print("error: WEATHER_API_KEY is not set", file=sys.stderr)
sys.exit(3)
