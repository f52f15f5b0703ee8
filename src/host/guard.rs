//! What a listening front (the gateway, `mcp serve --listen`, the mock provider) refuses before any route
//! sees a request, so a web page the user happens to open cannot use it: a `Host` that
//! is not a loopback name or address while the server listens on loopback (DNS
//! rebinding: a page of `evil.example` resolved to 127.0.0.1), an `Origin` not on the
//! allow-list (`[server] allowed_origins`, none by default: a browser's cross-site
//! request), and a `POST` whose body is not `Content-Type: application/json` (the types
//! a page may send without asking first, `text/plain` and forms). A `POST` with neither a
//! body nor a type goes on to its route, which answers it as any body it cannot read: the
//! OpenAI SDK's `responses.cancel` sends one, and the gateway, which serves no such route,
//! owes it its 404, not a 415 (a page's `POST` carries an `Origin`, refused above, and
//! without a body it has nothing to send). One check for every front, applied by
//! [`serve`](super::serve::serve) itself; each front answers a refusal in its own shape.

use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::Response;

/// The rules one server applies, and how it answers a refusal.
#[derive(Debug, Clone)]
pub struct Guard {
    /// The server listens on loopback only: other Hosts are refused.
    pub loopback: bool,
    /// `scheme://host[:port]`, compared without case.
    pub allowed_origins: Vec<String>,
    /// The refusal in the front's own shape (OpenAI's error, MCP's plain text…).
    pub answer: fn(Refusal) -> Response,
}

/// Why a request was refused, and the status it gets (403 or 415).
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    pub status: StatusCode,
    pub message: String,
}

impl Guard {
    pub fn new(
        loopback: bool,
        allowed_origins: &[String],
        answer: fn(Refusal) -> Response,
    ) -> Self {
        Guard {
            loopback,
            allowed_origins: allowed_origins
                .iter()
                .map(|o| o.trim_end_matches('/').to_ascii_lowercase())
                .collect(),
            answer,
        }
    }

    /// The guard of a server listening at `addr`: loopback's rules when it is on
    /// loopback.
    pub fn at(
        addr: std::net::SocketAddr,
        allowed_origins: &[String],
        answer: fn(Refusal) -> Response,
    ) -> Self {
        Guard::new(addr.ip().is_loopback(), allowed_origins, answer)
    }

    /// A refusal as plain text with its status.
    pub fn plain(refusal: Refusal) -> Response {
        axum::response::IntoResponse::into_response((refusal.status, refusal.message))
    }

    /// Whether a request of `method` with `headers` may go on.
    /// [`Guard::check`] of a whole request: its target too, which may name a host of its
    /// own (`GET http://evil.example/ HTTP/1.1`, the absolute form proxies use) that a
    /// proxy in front would take over the Host header.
    pub fn check_request(
        &self,
        method: &Method,
        uri: &http::Uri,
        headers: &HeaderMap,
    ) -> Result<(), Refusal> {
        if self.loopback
            && let Some(authority) = uri.authority()
            && !is_loopback_authority(authority.as_str())
        {
            return Err(Refusal {
                status: StatusCode::FORBIDDEN,
                message: format!(
                    "the request names the host `{}`, not this server's",
                    crate::catalog::compact::cut(authority.as_str(), 80)
                ),
            });
        }
        self.check(method, headers)
    }

    pub fn check(&self, method: &Method, headers: &HeaderMap) -> Result<(), Refusal> {
        let forbidden = |message: String| Refusal {
            status: StatusCode::FORBIDDEN,
            message,
        };
        // One of each: a second Host or Origin is read by whatever sits in front (a proxy
        // may take the last) while this guard read the first.
        for name in [header::HOST, header::ORIGIN] {
            if headers.get_all(&name).iter().nth(1).is_some() {
                return Err(Refusal {
                    status: StatusCode::BAD_REQUEST,
                    message: format!("a request may have one {name} header, not several"),
                });
            }
        }
        if self.loopback {
            let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
            match host {
                Some(h) if is_loopback_authority(h) => {}
                Some(h) => {
                    return Err(forbidden(format!(
                        "Host `{h}` is not this server's: it listens on loopback and answers localhost, 127.0.0.1 and [::1] only"
                    )));
                }
                None => return Err(forbidden("a request needs a Host header".into())),
            }
        }
        if let Some(origin) = headers.get(header::ORIGIN) {
            let origin = origin.to_str().unwrap_or_default().to_ascii_lowercase();
            if !self.allowed_origins.contains(&origin) {
                return Err(forbidden(format!(
                    "Origin `{origin}` is not allowed; list it in [server] allowed_origins to let a web page call this server"
                )));
            }
        }
        // A browser names where a request comes from in Sec-Fetch-Site, on every request,
        // where Origin is absent from the simple GETs any page can make (an <img> of
        // /v1/models made the gateway call its provider with the key). SDKs and tools send
        // no such header; a page of an allowed origin is same-origin or listed above.
        if let Some(site) = headers.get("sec-fetch-site") {
            let site = site.to_str().unwrap_or_default();
            let allowed_origin = headers.get(header::ORIGIN).is_some();
            if !allowed_origin && !matches!(site, "same-origin" | "none") {
                return Err(forbidden(format!(
                    "a request a browser made for a page of another site (Sec-Fetch-Site: {}) is not answered",
                    crate::catalog::compact::cut(site, 40)
                )));
            }
        }
        if method == Method::POST && !is_json(headers) && !is_bodiless(headers) {
            return Err(Refusal {
                status: StatusCode::UNSUPPORTED_MEDIA_TYPE,
                message: "a POST body must be sent with Content-Type: application/json".into(),
            });
        }
        Ok(())
    }
}

/// `localhost`, `127.x.y.z` or `[::1]`, with or without a port.
fn is_loopback_authority(authority: &str) -> bool {
    // A port is digits, or nothing: `127.0.0.1:1@evil.example` is no loopback authority
    // (a proxy in front may read its host as `evil.example`).
    let port_ok = |port: &str| port.len() <= 5 && port.bytes().all(|b| b.is_ascii_digit());
    let host = match authority.strip_prefix('[') {
        Some(rest) => match rest.split_once(']') {
            Some((ip, "")) => ip,
            Some((ip, port)) if port.strip_prefix(':').is_some_and(port_ok) => ip,
            _ => return false,
        },
        None => match authority.rsplit_once(':') {
            Some((host, port)) if port_ok(port) => host,
            Some(_) => return false,
            None => authority,
        },
    };
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// No `Content-Type` and no body: no `Transfer-Encoding`, and a `Content-Length` of 0 or
/// none (HTTP/1.1's request without a body; the server speaks nothing else).
fn is_bodiless(headers: &HeaderMap) -> bool {
    !headers.contains_key(header::CONTENT_TYPE)
        && !headers.contains_key(header::TRANSFER_ENCODING)
        && headers
            .get_all(header::CONTENT_LENGTH)
            .iter()
            .all(|length| length.as_bytes().trim_ascii() == b"0")
}

fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn loopback_hosts_pass_and_others_are_refused() {
        let g = Guard::new(true, &[], Guard::plain);
        for host in [
            "localhost",
            "localhost:8080",
            "127.0.0.1:1",
            "[::1]:9",
            "[::1]",
            "LOCALHOST",
        ] {
            assert!(
                g.check(&Method::GET, &headers(&[("host", host)])).is_ok(),
                "{host}"
            );
        }
        for host in [
            "evil.example",
            "evil.example:80",
            "localhost.evil.example",
            "[::1]x",
            "10.0.0.1",
        ] {
            let e = g
                .check(&Method::GET, &headers(&[("host", host)]))
                .unwrap_err();
            assert_eq!(e.status, StatusCode::FORBIDDEN, "{host}");
        }
        assert!(g.check(&Method::GET, &HeaderMap::new()).is_err());
        for host in [
            "127.0.0.1:1@evil.example",
            "localhost:80x",
            "[::1]:x",
            "[::1]x",
            "127.0.0.1:123456",
        ] {
            assert!(
                g.check(&Method::GET, &headers(&[("host", host)])).is_err(),
                "{host}"
            );
        }
        // A second Host, or a target naming another host, is refused whatever the first says.
        let mut two = headers(&[("host", "localhost")]);
        two.append(header::HOST, "evil.example".parse().unwrap());
        assert_eq!(
            g.check(&Method::GET, &two).unwrap_err().status,
            StatusCode::BAD_REQUEST
        );
        let one = headers(&[("host", "localhost")]);
        let uri: http::Uri = "http://evil.example/v1/models".parse().unwrap();
        assert!(g.check_request(&Method::GET, &uri, &one).is_err());
        let uri: http::Uri = "http://127.0.0.1:8080/v1/models".parse().unwrap();
        assert!(g.check_request(&Method::GET, &uri, &one).is_ok());
        let uri: http::Uri = "/v1/models".parse().unwrap();
        assert!(g.check_request(&Method::GET, &uri, &one).is_ok());
        assert!(
            Guard::new(false, &[], Guard::plain)
                .check(&Method::GET, &headers(&[("host", "evil.example")]))
                .is_ok()
        );
    }

    /// An <img> or <script> of another site's page carries no Origin, but its browser says
    /// where it comes from: refused unless same-origin, or typed by the user (`none`), or
    /// from an origin on the list.
    #[test]
    fn a_browser_s_cross_site_request_without_origin_is_refused() {
        let g = Guard::new(true, &["http://localhost:3000".into()], Guard::plain);
        for site in ["cross-site", "same-site", "weird"] {
            let h = [("host", "127.0.0.1:8788"), ("sec-fetch-site", site)];
            assert_eq!(
                g.check(&Method::GET, &headers(&h)).unwrap_err().status,
                StatusCode::FORBIDDEN,
                "{site}"
            );
        }
        for site in ["same-origin", "none"] {
            let h = [("host", "127.0.0.1:8788"), ("sec-fetch-site", site)];
            assert!(g.check(&Method::GET, &headers(&h)).is_ok(), "{site}");
        }
        let listed = [
            ("host", "localhost"),
            ("origin", "http://localhost:3000"),
            ("sec-fetch-site", "same-site"),
        ];
        assert!(g.check(&Method::GET, &headers(&listed)).is_ok());
    }

    #[test]
    fn origins_must_be_listed_and_posts_must_be_json() {
        let g = Guard::new(true, &["http://localhost:3000/".into()], Guard::plain);
        let ok = [
            ("host", "localhost"),
            ("content-type", "application/json; charset=utf-8"),
        ];
        assert!(g.check(&Method::POST, &headers(&ok)).is_ok());
        let listed = [("host", "localhost"), ("origin", "http://LOCALHOST:3000")];
        assert!(g.check(&Method::GET, &headers(&listed)).is_ok());
        let foreign = [("host", "localhost"), ("origin", "http://evil.example")];
        assert_eq!(
            g.check(&Method::GET, &headers(&foreign))
                .unwrap_err()
                .status,
            StatusCode::FORBIDDEN
        );
        let plain = [("host", "localhost"), ("content-type", "text/plain")];
        assert_eq!(
            g.check(&Method::POST, &headers(&plain)).unwrap_err().status,
            StatusCode::UNSUPPORTED_MEDIA_TYPE
        );
        // A POST with a body must say it is JSON; one with neither goes on to its route.
        for sent in [
            [("host", "localhost"), ("content-length", "2")],
            [("host", "localhost"), ("transfer-encoding", "chunked")],
            [("host", "localhost"), ("content-type", "text/plain")],
        ] {
            assert_eq!(
                g.check(&Method::POST, &headers(&sent)).unwrap_err().status,
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "{sent:?}"
            );
        }
        let mut typed_empty = headers(&[("host", "localhost"), ("content-length", "0")]);
        typed_empty.insert(header::CONTENT_TYPE, "text/plain".parse().unwrap());
        assert!(g.check(&Method::POST, &typed_empty).is_err());
        let mut two_lengths = headers(&[("host", "localhost"), ("content-length", "0")]);
        two_lengths.append(header::CONTENT_LENGTH, "5".parse().unwrap());
        assert!(g.check(&Method::POST, &two_lengths).is_err());
        for empty in [
            headers(&[("host", "localhost")]),
            headers(&[("host", "localhost"), ("content-length", "0")]),
        ] {
            assert!(g.check(&Method::POST, &empty).is_ok(), "{empty:?}");
        }
        // The page of a foreign origin is refused all the same.
        let foreign_empty = [("host", "localhost"), ("origin", "http://evil.example")];
        assert!(g.check(&Method::POST, &headers(&foreign_empty)).is_err());
    }
}
