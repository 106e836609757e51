"""Writes a Google service account key file to argv[1], with a fresh RSA key and argv[2] as its
token endpoint: google-auth signs a grant with the key and gets an access token there, as it
does from Google, from the fake provider that stands in for it."""
import json
import sys

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
pem = key.private_bytes(
    serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
).decode()
info = {
    "type": "service_account",
    "project_id": "llmreplay-test",
    "private_key_id": "1",
    "private_key": pem,
    "client_email": "ci@llmreplay-test.iam.gserviceaccount.com",
    "client_id": "1",
    "token_uri": sys.argv[2],
}
with open(sys.argv[1], "w") as f:
    json.dump(info, f)
