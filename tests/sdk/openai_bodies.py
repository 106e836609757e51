"""Drives the official `openai` SDK through cargo-llmreplay as an application would: speech
(binary answer), transcription (multipart upload), images, embeddings and a streamed Responses
call. Prints one JSON object of what the application saw, for the Rust test to compare.

The client is pointed at the daemon by OPENAI_BASE_URL and OPENAI_API_KEY, as the runner
injects them; with AZURE=1 it is the SDK's AzureOpenAI client, pointed by AZURE_OPENAI_ENDPOINT.
"""

import hashlib
import io
import json
import os
import sys

import openai


def client():
    if os.environ.get("AZURE") == "1":
        return openai.AzureOpenAI(api_version="2024-10-21", max_retries=0)
    return openai.OpenAI(max_retries=0)


def main():
    c = client()
    model = os.environ.get("MODEL", "gpt-4o-mini")
    seen = {}

    speech = c.audio.speech.create(model="gpt-4o-mini-tts", voice="alloy", input="Say hello")
    audio = speech.read()
    seen["speech"] = {"bytes": len(audio), "sha256": hashlib.sha256(audio).hexdigest()}

    upload = bytes((i * 37 + 11) % 256 for i in range(4000))
    text = c.audio.transcriptions.create(
        model="whisper-1", file=("clip.wav", io.BytesIO(upload), "audio/wav")
    )
    seen["transcription"] = text.text

    if os.environ.get("AZURE") != "1":
        image = c.images.generate(model="gpt-image-1", prompt="a lighthouse")
        seen["image_b64_len"] = len(image.data[0].b64_json)

    emb = c.embeddings.create(model="text-embedding-3-small", input="hello")
    seen["embedding"] = emb.data[0].embedding

    if os.environ.get("AZURE") != "1":
        deltas = []
        with c.responses.stream(model=model, input="Stream this please") as stream:
            for event in stream:
                if event.type == "response.output_text.delta":
                    deltas.append(event.delta)
            final = stream.get_final_response()
        seen["responses_deltas"] = deltas
        seen["responses_text"] = final.output_text

    json.dump(seen, sys.stdout, sort_keys=True)


if __name__ == "__main__":
    try:
        main()
    except openai.APIStatusError as e:
        print(f"{type(e).__name__}: {e.status_code} {e.message}", file=sys.stderr)
        sys.exit(3)
