//! The request a redirect asks for (RFC 9110 section 15.4), as curl `-L`
//! and browsers make it. The caller sends it with [`super::send`], which
//! checks the new destination against the policy like the first one.

use http::{Method, StatusCode};
use url::Url;

use super::client::{Request, Response};
use super::error::HttpError;

/// Headers that carry credentials; they are not sent to another origin.
const CREDENTIALS: [&str; 3] = ["authorization", "cookie", "proxy-authorization"];
/// Headers that describe a body; they go when the body goes.
const BODY_HEADERS: [&str; 2] = ["content-type", "content-length"];

/// The next request when `resp` (the answer to `req`) is a redirect with
/// a `Location`; `None` otherwise (300, 304, 305, or no `Location`).
///
/// 301 and 302 turn a POST into a GET, 303 turns anything but HEAD into a
/// GET (both dropping the body), 307 and 308 repeat the request as it was.
/// Credentials (`Authorization`, `Cookie`) are dropped when the scheme,
/// host or port changes, as curl does without `--location-trusted`.
/// Errors: a `Location` that is not a valid URL reference.
pub fn follow(req: &Request, resp: &Response) -> Option<Result<Request, HttpError>> {
    let code = resp.status;
    if !matches!(code.as_u16(), 301 | 302 | 303 | 307 | 308) {
        return None;
    }
    let location = resp.headers.get(http::header::LOCATION)?;
    Some(next(req, code, location.as_bytes()))
}

fn next(req: &Request, code: StatusCode, location: &[u8]) -> Result<Request, HttpError> {
    let text = std::str::from_utf8(location)
        .map_err(|_| HttpError::BadUrl("Location header is not UTF-8".into()))?;
    let url: Url = req
        .url
        .join(text.trim())
        .map_err(|e| HttpError::BadUrl(format!("bad Location {text:?}: {e}")))?;
    let to_get = match code.as_u16() {
        301 | 302 => req.method == Method::POST,
        303 => req.method != Method::HEAD,
        _ => false,
    };
    let same_origin = url.scheme() == req.url.scheme()
        && url.host_str() == req.url.host_str()
        && url.port_or_known_default() == req.url.port_or_known_default();
    let mut next = req.clone();
    next.url = url;
    if to_get {
        next.method = Method::GET;
        next.body = bytes::Bytes::new();
    }
    next.headers.retain(|(name, _)| {
        let name = name.to_ascii_lowercase();
        !(to_get && BODY_HEADERS.contains(&name.as_str())
            || !same_origin && CREDENTIALS.contains(&name.as_str()))
    });
    Ok(next)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(method: Method, url: &str) -> Request {
        Request {
            method,
            url: url.parse().unwrap(),
            headers: vec![
                ("Authorization".into(), "Basic eDp5".into()),
                ("Content-Type".into(), "application/json".into()),
                ("X-Trace".into(), "1".into()),
            ],
            body: bytes::Bytes::from_static(b"{}"),
            insecure: false,
        }
    }

    fn names(r: &Request) -> Vec<&str> {
        r.headers.iter().map(|(n, _)| n.as_str()).collect()
    }

    #[test]
    fn post_becomes_get_on_301_302_303() {
        for code in [301, 302, 303] {
            let req = request(Method::POST, "http://a.test/form");
            let code = StatusCode::from_u16(code).unwrap();
            let next = next(&req, code, b"/done").unwrap();
            assert_eq!(next.method, Method::GET);
            assert!(next.body.is_empty());
            assert_eq!(next.url.as_str(), "http://a.test/done");
            assert_eq!(names(&next), ["Authorization", "X-Trace"]);
        }
        let put = request(Method::PUT, "http://a.test/x");
        let kept = next(&put, StatusCode::FOUND, b"/y").unwrap();
        assert_eq!(kept.method, Method::PUT);
    }

    #[test]
    fn temporary_and_permanent_keep_the_request() {
        for code in [307, 308] {
            let req = request(Method::POST, "http://a.test/x");
            let next = next(&req, StatusCode::from_u16(code).unwrap(), b"y").unwrap();
            assert_eq!(next.method, Method::POST);
            assert_eq!(&next.body[..], b"{}");
            assert_eq!(next.url.as_str(), "http://a.test/y");
        }
    }

    #[test]
    fn credentials_stay_with_their_origin() {
        let req = request(Method::GET, "http://a.test/");
        let other = next(&req, StatusCode::FOUND, b"http://b.test/").unwrap();
        assert_eq!(names(&other), ["Content-Type", "X-Trace"]);
        let port = next(&req, StatusCode::FOUND, b"http://a.test:81/").unwrap();
        assert!(!names(&port).contains(&"Authorization"));
        let same = next(&req, StatusCode::FOUND, b"http://a.test:80/x").unwrap();
        assert!(names(&same).contains(&"Authorization"));
    }

    #[test]
    fn bad_locations_are_errors() {
        let req = request(Method::GET, "http://a.test/");
        assert!(next(&req, StatusCode::FOUND, b"http://[::1").is_err());
        assert!(next(&req, StatusCode::FOUND, &[0xff]).is_err());
    }
}
