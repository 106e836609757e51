"""Secrets in bodies, sent by the official SDKs: `mcp TOKEN` sends a hosted MCP tool's
`authorization` with OpenAI's Responses API and an MCP server's `authorization_token` with
Anthropic's Messages API; `google SECRET REFRESH` refreshes google-auth user credentials at
Google's token endpoint, `toolcall PASSWORD TOKEN` sends a chat history whose assistant
tool call carries a password in its `arguments` and whose tool result is a token as JSON text,
with OpenAI's Chat Completions API, and `azure SECRET` gets a token with azure-identity's
ClientSecretCredential from Microsoft Entra ID (both through the proxy the environment
names), `realtime` asks OpenAI for a Realtime client secret (a bare `value`) and a beta
Realtime session (its `client_secret.value`), and `sts KEY_ID SECRET` assumes a role with
boto3 through AWS STS, then signs a GetCallerIdentity with the role's temporary credentials
(through the proxy; boto3 trusts the run's CA by `AWS_CA_BUNDLE`). Prints what came back."""

import json
import sys

mode = sys.argv[1]
if mode == "mcp":
    import anthropic
    import openai

    token = sys.argv[2]
    response = openai.OpenAI().responses.create(
        model="gpt-4.1-mini",
        input="Use the wiki tool",
        tools=[
            {
                "type": "mcp",
                "server_label": "wiki",
                "server_url": "https://mcp.example/mcp",
                "require_approval": "never",
                "authorization": token,
            }
        ],
    )
    message = anthropic.Anthropic().beta.messages.create(
        model="claude-x",
        max_tokens=50,
        messages=[{"role": "user", "content": "Use the MCP server"}],
        mcp_servers=[
            {
                "type": "url",
                "url": "https://mcp.example/sse",
                "name": "example",
                "authorization_token": token,
            }
        ],
        betas=["mcp-client-2025-04-04"],
    )
    print(json.dumps({"openai": response.output_text, "anthropic": message.content[0].text}))
elif mode == "toolcall":
    import openai

    password, token = sys.argv[2], sys.argv[3]
    arguments = json.dumps({"user": "ana", "password": password})
    completion = openai.OpenAI().chat.completions.create(
        model="gpt-4o-mini",
        messages=[
            {"role": "user", "content": "Log ana in"},
            {
                "role": "assistant",
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "login", "arguments": arguments},
                    }
                ],
            },
            {
                "role": "tool",
                "tool_call_id": "call_1",
                "content": json.dumps({"access_token": token, "expires_in": 3600}),
            },
            {"role": "user", "content": "Am I in?"},
        ],
    )
    print(json.dumps({"answer": completion.choices[0].message.content}))
elif mode == "google":
    import google.auth.transport.requests
    import google.oauth2.credentials

    credentials = google.oauth2.credentials.Credentials(
        token=None,
        refresh_token=sys.argv[3],
        client_id="1234.apps.googleusercontent.com",
        client_secret=sys.argv[2],
        token_uri="https://oauth2.googleapis.com/token",
    )
    credentials.refresh(google.auth.transport.requests.Request())
    print(json.dumps({"token": credentials.token, "refresh": credentials.refresh_token}))
elif mode == "azure":
    from azure.identity import ClientSecretCredential

    credential = ClientSecretCredential(
        "00000000-0000-0000-0000-00000000cafe", "11111111-2222-3333-4444-555555555555", sys.argv[2]
    )
    token = credential.get_token("https://cognitiveservices.azure.com/.default")
    print(json.dumps({"token": token.token}))
elif mode == "realtime":
    import openai

    client = openai.OpenAI()
    secret = client.realtime.client_secrets.create(
        session={"type": "realtime", "model": "gpt-realtime", "instructions": "Be brief."},
        expires_after={"anchor": "created_at", "seconds": 600},
    )
    session = client.beta.realtime.sessions.create(model="gpt-realtime")
    print(
        json.dumps(
            {
                "value": secret.value,
                "expires_at": secret.expires_at,
                "session": session.client_secret.value,
                "session_expires_at": session.client_secret.expires_at,
            }
        )
    )
elif mode == "sts":
    import boto3

    sts = boto3.client(
        "sts",
        region_name="us-east-1",
        aws_access_key_id=sys.argv[2],
        aws_secret_access_key=sys.argv[3],
    )
    role = sts.assume_role(RoleArn="arn:aws:iam::123456789012:role/ci-role", RoleSessionName="ci")
    creds = role["Credentials"]
    assumed = boto3.client(
        "sts",
        region_name="us-east-1",
        aws_access_key_id=creds["AccessKeyId"],
        aws_secret_access_key=creds["SecretAccessKey"],
        aws_session_token=creds["SessionToken"],
    )
    me = assumed.get_caller_identity()
    print(
        json.dumps(
            {
                "key_id": creds["AccessKeyId"],
                "secret": creds["SecretAccessKey"],
                "session": creds["SessionToken"],
                "arn": me["Arn"],
            }
        )
    )
else:
    sys.exit(f"unknown mode {mode}")
