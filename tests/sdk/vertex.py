"""generate_content and generate_content_stream through google-genai with vertexai=True, pointed
at the daemon by GOOGLE_VERTEX_BASE_URL as the runner injects it, with a short-lived OAuth token
(VERTEX_TOKEN) as google-auth would give. Prints the answers as JSON."""
import json
import os

import google.oauth2.credentials
from google import genai

credentials = google.oauth2.credentials.Credentials(token=os.environ["VERTEX_TOKEN"])
client = genai.Client(vertexai=True, project="llmreplay-test", location="us-central1", credentials=credentials)
whole = client.models.generate_content(model="gemini-2.5-flash", contents="Hello Vertex")
chunks = [c.text for c in client.models.generate_content_stream(model="gemini-2.5-flash", contents="Stream Vertex")]
print(json.dumps({"text": whole.text, "chunks": chunks}))
