"""google-genai on Vertex AI configured by the environment alone: GOOGLE_GENAI_USE_VERTEXAI,
GOOGLE_CLOUD_PROJECT and GOOGLE_CLOUD_LOCATION, credentials found by google-auth (Application
Default Credentials). generate_content and generate_content_stream; prints the answers as JSON."""
import json

from google import genai

client = genai.Client()
whole = client.models.generate_content(model="gemini-2.5-flash", contents="Hello Vertex")
chunks = [c.text for c in client.models.generate_content_stream(model="gemini-2.5-flash", contents="Stream Vertex")]
print(json.dumps({"text": whole.text, "chunks": chunks}))
