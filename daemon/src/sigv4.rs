//! Bedrock's requests come signed (SigV4) for the daemon's host, which the real endpoint
//! rejects: recording signs them again for the upstream with the credentials of the
//! environment, in the region and service the client signed for. aws-sigv4 signs; the
//! client's signing headers are dropped and never stored.

use bytes::Bytes;
use http_body_util::Full;
use std::time::SystemTime;

/// Replaces the client's signature on `request` (already aimed at the upstream) with one made
/// from `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` and `AWS_SESSION_TOKEN`. The region and
/// service come from the client's own credential scope, else `AWS_REGION` and `bedrock`.
/// Why a request could not be signed again.
#[derive(Debug, thiserror::Error)]
pub enum SigningError {
    /// No credentials in the environment.
    #[error("Bedrock requests are signed again for the real endpoint, with the credentials of the environment: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN for temporary ones) where cargo llmreplay records")]
    NoCredentials,
    /// The signing parameters are incomplete.
    #[error("cannot sign for {region}/{service}: {source}")]
    Params {
        /// The region signed for.
        region: String,
        /// The service signed for.
        service: String,
        /// aws-sigv4's error.
        source: aws_sigv4::sign::v4::signing_params::BuildError,
    },
    /// aws-sigv4 refused the request.
    #[error("cannot sign this request: {0}")]
    Request(#[from] aws_sigv4::http_request::SigningError),
}

pub fn resign(request: &mut http::Request<Full<Bytes>>, body: &[u8]) -> Result<(), SigningError> {
    let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let (Some(key_id), Some(secret)) = (env("AWS_ACCESS_KEY_ID"), env("AWS_SECRET_ACCESS_KEY"))
    else {
        return Err(SigningError::NoCredentials);
    };
    // `Credential=AKID/20260101/us-east-1/bedrock/aws4_request`.
    let scope: Option<Vec<String>> = request
        .headers()
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split("Credential=").nth(1))
        .map(|c| {
            c.split([',', ' '])
                .next()
                .unwrap_or("")
                .split('/')
                .map(str::to_string)
                .collect()
        });
    let region = scope
        .as_ref()
        .and_then(|s| s.get(2).cloned())
        .or_else(|| env("AWS_REGION"))
        .or_else(|| env("AWS_DEFAULT_REGION"))
        .unwrap_or_else(|| "us-east-1".into());
    let service = scope
        .as_ref()
        .and_then(|s| s.get(3).cloned())
        .unwrap_or_else(|| "bedrock".into());
    for name in providers::BEDROCK_SIGNING_HEADERS {
        request.headers_mut().remove(*name);
    }
    let identity = aws_credential_types::Credentials::new(
        key_id,
        secret,
        env("AWS_SESSION_TOKEN"),
        None,
        "environment",
    )
    .into();
    let params = aws_sigv4::sign::v4::SigningParams::builder()
        .identity(&identity)
        .region(&region)
        .name(&service)
        .time(SystemTime::now())
        .settings(aws_sigv4::http_request::SigningSettings::default())
        .build()
        .map_err(|source| SigningError::Params {
            region: region.clone(),
            service: service.clone(),
            source,
        })?
        .into();
    let uri = request.uri().to_string();
    // The content type is signed, as the SDKs sign it; the rest is forwarded unsigned.
    let content_type = request
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let headers = content_type.iter().map(|v| ("content-type", v.as_str()));
    let signable = aws_sigv4::http_request::SignableRequest::new(
        request.method().as_str(),
        uri,
        headers,
        aws_sigv4::http_request::SignableBody::Bytes(body),
    )?;
    let (instructions, _) = aws_sigv4::http_request::sign(signable, &params)?.into_parts();
    instructions.apply_to_request_http1x(request);
    Ok(())
}
