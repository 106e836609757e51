//! Sends a recorded request to the real provider again, with the user's key from the
//! provider's usual environment variable, and reads the whole answer into its recorded form:
//! what `cargo llmreplay rerun` compares with the cassette. The key goes into the request's
//! headers only; nothing here writes anything.

use crate::config::Settings;
use crate::provider::{Family, Provider};
use crate::tee::{recordable_headers, stream_format};
use crate::upstream;
use bytes::Bytes;
use cassettes::{RecordedRequest, RecordedResponse, Timing};
use http::header::{ACCEPT_ENCODING, CONTENT_TYPE};
use http_body_util::Full;
use std::time::Instant;

/// A fresh answer to a recorded request.
#[derive(Debug)]
pub struct Resent {
    /// The answer, in its recorded form.
    pub response: RecordedResponse,
    /// How long it took.
    pub timing: Timing,
    /// The provider's id for this request, from its response headers or body.
    pub request_id: Option<String>,
}

/// Sends recorded requests upstream: one HTTP(S) client for every provider of the settings.
pub struct Resender {
    client: upstream::Client,
    redact: Vec<String>,
    idle_timeout: std::time::Duration,
    allow_credentials_to: Vec<String>,
}

impl Resender {
    /// A resender with the settings' network and limits.
    pub fn new(settings: &Settings) -> Result<Self, upstream::ClientError> {
        Ok(Resender {
            client: upstream::client(settings.limits.connect_timeout, &settings.network)?,
            redact: settings.redact_headers.clone(),
            idle_timeout: settings.limits.idle_timeout,
            allow_credentials_to: settings.allow_credentials_to.clone(),
        })
    }

    /// Sends `request` (body as given in `body`, of `content_type` when it is not JSON) and waits
    /// for the whole answer. An answer with any status is `Ok`; only a request that got no answer
    /// at all is an `Err`.
    pub async fn send(
        &self,
        provider: &Provider,
        request: &RecordedRequest,
        body: Bytes,
        content_type: Option<&str>,
        key: Option<&str>,
    ) -> Result<Resent, ResendError> {
        let uri = provider.upstream_uri(&request.path, request.query.as_deref())?;
        provider.may_send_credentials(&uri, &self.allow_credentials_to, key.is_some())?;
        let url = providers::redact::url(&uri.to_string()).into_owned();
        let mut builder = http::Request::builder()
            .method(request.method.as_str())
            .uri(uri)
            .header(ACCEPT_ENCODING, "identity");
        match (request.json(), content_type) {
            (_, Some(ct)) => builder = builder.header(CONTENT_TYPE, ct),
            (Some(_), None) => builder = builder.header(CONTENT_TYPE, "application/json"),
            (None, None) => {}
        }
        let family = provider.family();
        for (name, value) in family.required_headers() {
            builder = builder.header(*name, *value);
        }
        for (name, value) in key.map(|k| family.auth_headers(k)).unwrap_or_default() {
            builder = builder.header(name, value);
        }
        let mut outgoing =
            builder
                .body(Full::new(body.clone()))
                .map_err(|source| ResendError::Request {
                    url: url.clone(),
                    source,
                })?;
        if family.resigns_requests() {
            crate::sigv4::resign(&mut outgoing, &body)?;
        }
        let started = Instant::now();
        let answer =
            self.client
                .request(outgoing)
                .await
                .map_err(|source| ResendError::Unreachable {
                    url: url.clone(),
                    source,
                })?;
        let headers_at = started.elapsed();
        let status = answer.status().as_u16();
        let (parts, incoming) = answer.into_parts();
        let captured = crate::tee::read_answer(
            incoming,
            started,
            headers_at,
            self.idle_timeout,
            |_| async {},
        )
        .await
        .map_err(|source| ResendError::BrokeOff { url, source })?;
        let format = stream_format(&parts.headers);
        let headers = recordable_headers(&parts.headers, &self.redact);
        let (response, timing) = captured.into_response(status, headers, format);
        let request_id = request_id(provider.family(), &response);
        Ok(Resent {
            response,
            timing,
            request_id,
        })
    }
}

/// Why a recorded request got no answer.
#[derive(Debug, thiserror::Error)]
pub enum ResendError {
    /// The provider has no usable upstream, or may not get the daemon's credentials.
    #[error(transparent)]
    Upstream(#[from] crate::provider::UpstreamError),
    /// The request could not be signed again.
    #[error(transparent)]
    Signing(#[from] crate::sigv4::SigningError),
    /// The request could not be built.
    #[error("bad request to {url}: {source}")]
    Request {
        /// The URL, its secrets masked.
        url: String,
        /// Why.
        source: http::Error,
    },
    /// The upstream did not answer.
    #[error("could not reach {url}: {source:?}")]
    Unreachable {
        /// The URL, its secrets masked.
        url: String,
        /// The client's error, with its chain.
        source: hyper_util::client::legacy::Error,
    },
    /// The answer stopped midway.
    #[error("the answer from {url} broke off: {source}")]
    BrokeOff {
        /// The URL, its secrets masked.
        url: String,
        /// Why.
        source: std::io::Error,
    },
}

/// The provider's id of the request, as its family names it.
fn request_id(family: &dyn Family, response: &RecordedResponse) -> Option<String> {
    family.request_id(&response.headers, &response.payloads())
}
