"""Converse and ConverseStream through boto3's `bedrock-runtime` client, pointed at the daemon
by AWS_ENDPOINT_URL_BEDROCK_RUNTIME as the runner injects it, signing with whatever
credentials the environment has. Prints the answers as JSON."""
import json

import boto3

client = boto3.client("bedrock-runtime")
model = "anthropic.claude-3-haiku-20240307-v1:0"
messages = [{"role": "user", "content": [{"text": "Hello Bedrock"}]}]
whole = client.converse(modelId=model, messages=messages)
streamed = client.converse_stream(modelId=model, messages=[{"role": "user", "content": [{"text": "Stream it"}]}])
deltas = []
usage = None
for event in streamed["stream"]:
    if "contentBlockDelta" in event:
        deltas.append(event["contentBlockDelta"]["delta"]["text"])
    if "metadata" in event:
        usage = event["metadata"]["usage"]
# InvokeModel: the model's own body, whole and streamed.
native = {"anthropic_version": "bedrock-2023-05-31", "max_tokens": 64, "messages": [{"role": "user", "content": "Invoke me"}]}
invoked = json.loads(client.invoke_model(modelId=model, body=json.dumps(native))["body"].read())
chunks = []
for event in client.invoke_model_with_response_stream(modelId=model, body=json.dumps({**native, "messages": [{"role": "user", "content": "Invoke streamed"}]}))["body"]:
    e = json.loads(event["chunk"]["bytes"])
    if e["type"] == "content_block_delta":
        chunks.append(e["delta"]["text"])
print(json.dumps({
    "invoked": invoked["content"][0]["text"],
    "invoked_chunks": chunks,
    "text": whole["output"]["message"]["content"][0]["text"],
    "usage": whole["usage"],
    "deltas": deltas,
    "stream_usage": usage,
}))
