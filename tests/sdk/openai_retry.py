"""One chat call through the official `openai` SDK with `max_retries=2`, pointed at the daemon
by OPENAI_BASE_URL: a fault's 429 is retried by the SDK itself. Prints the answer's text."""

import openai

client = openai.OpenAI(max_retries=2)
answer = client.chat.completions.create(
    model="gpt-4o-mini", messages=[{"role": "user", "content": "Hello there"}]
)
print(answer.choices[0].message.content)
