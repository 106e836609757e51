//! The client for real providers: HTTPS through rustls with the ring provider and bundled web
//! roots (no system OpenSSL, no certificate store needed), and plain HTTP for local gateways.

use bytes::Bytes;
use http_body_util::Full;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

pub type Client = hyper_util::client::legacy::Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

/// `connect_timeout` bounds how long a provider may take to accept the connection.
pub fn client(connect_timeout: std::time::Duration) -> Result<Client, rustls::Error> {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_connect_timeout(Some(connect_timeout));
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_provider_and_webpki_roots(rustls::crypto::ring::default_provider())?
        .https_or_http()
        .enable_http1()
        .wrap_connector(http);
    Ok(hyper_util::client::legacy::Client::builder(TokioExecutor::new()).build(https))
}
