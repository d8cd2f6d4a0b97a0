//! Web-platform natives: text encodings, base64/hex, randomness, WHATWG URL
//! parsing (the `url` crate) and the `fetch` hook.

use std::rc::Rc;

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use rquickjs::function::Opt;
use rquickjs::{Ctx, Exception, Object, Result, TypedArray, Value};

use super::{set_fn, type_error, u8_array, with_bytes};
use crate::fetch::{FetchError, FetchRequest};
use crate::state::ExecState;

/// Lenient base64 decoding as Node's `Buffer.from(s, 'base64')`: accepts
/// both alphabets, ignores whitespace and other characters, padding
/// optional, stops at the first `=`.
fn base64_decode_lenient(s: &str) -> Vec<u8> {
    let mut clean = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            'A'..='Z' | 'a'..='z' | '0'..='9' => clean.push(c),
            '+' | '-' => clean.push('+'),
            '/' | '_' => clean.push('/'),
            '=' => break,
            _ => {}
        }
    }
    if clean.len() % 4 == 1 {
        clean.pop();
    }
    let engine = base64::engine::GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        base64::engine::GeneralPurposeConfig::new()
            .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent)
            .with_decode_allow_trailing_bits(true),
    );
    engine.decode(clean.as_bytes()).unwrap_or_default()
}

/// Hex decoding as Node's `Buffer.from(s, 'hex')`: stops at the first pair
/// that is not two hex digits.
fn hex_decode_lenient(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len() / 2);
    for pair in b.chunks_exact(2) {
        let hi = (pair[0] as char).to_digit(16);
        let lo = (pair[1] as char).to_digit(16);
        match (hi, lo) {
            (Some(h), Some(l)) => out.push((h * 16 + l) as u8),
            _ => break,
        }
    }
    out
}

fn hex_encode(b: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(b.len() * 2);
    for &x in b {
        s.push(DIGITS[(x >> 4) as usize] as char);
        s.push(DIGITS[(x & 15) as usize] as char);
    }
    s
}

/// The parts of a URL the JS `URL` class exposes, in a fixed order:
/// `[href, origin, protocol, username, password, host, hostname, port,
/// pathname, search, hash]`.
fn url_parts(u: &url::Url) -> Vec<String> {
    use url::quirks as q;
    vec![
        q::href(u).to_string(),
        q::origin(u),
        q::protocol(u).to_string(),
        q::username(u).to_string(),
        q::password(u).to_string(),
        q::host(u).to_string(),
        q::hostname(u).to_string(),
        q::port(u).to_string(),
        q::pathname(u).to_string(),
        q::search(u).to_string(),
        q::hash(u).to_string(),
    ]
}

pub(super) fn install<'js>(obj: &Object<'js>, st: &Rc<ExecState>) -> Result<()> {
    set_fn(obj, "utf8Encode", |ctx: Ctx<'js>, s: String| {
        u8_array(&ctx, s.into_bytes())
    })?;
    // utf8Decode(bytes, fatal): WHATWG "UTF-8 decode" with replacement, or a
    // TypeError on malformed input when `fatal`.
    set_fn(
        obj,
        "utf8Decode",
        |ctx: Ctx<'js>, data: Value<'js>, fatal: Opt<bool>| -> Result<String> {
            let fatal = fatal.0.unwrap_or(false);
            let r = with_bytes(&ctx, &data, |b| match std::str::from_utf8(b) {
                Ok(s) => Ok(s.to_string()),
                Err(_) if fatal => Err(()),
                Err(_) => Ok(String::from_utf8_lossy(b).into_owned()),
            })?;
            r.map_err(|_| type_error(&ctx, "The encoded data was not valid for encoding utf-8"))
        },
    )?;
    set_fn(obj, "utf8Length", |s: String| s.len())?;
    set_fn(
        obj,
        "base64Encode",
        |ctx: Ctx<'js>, data: Value<'js>, url: Opt<bool>| {
            with_bytes(&ctx, &data, |b| {
                if url.0.unwrap_or(false) {
                    URL_SAFE_NO_PAD.encode(b)
                } else {
                    STANDARD.encode(b)
                }
            })
        },
    )?;
    set_fn(obj, "base64Decode", |ctx: Ctx<'js>, s: String| {
        u8_array(&ctx, base64_decode_lenient(&s))
    })?;
    set_fn(obj, "hexEncode", |ctx: Ctx<'js>, data: Value<'js>| {
        with_bytes(&ctx, &data, hex_encode)
    })?;
    set_fn(obj, "hexDecode", |ctx: Ctx<'js>, s: String| {
        u8_array(&ctx, hex_decode_lenient(&s))
    })?;

    set_fn(
        obj,
        "randomFill",
        |ctx: Ctx<'js>, target: TypedArray<'js, u8>| -> Result<()> {
            let raw = target
                .as_raw()
                .ok_or_else(|| type_error(&ctx, "the buffer is detached"))?;
            // SAFETY: `raw` is the live backing store of `target`.
            let bytes =
                unsafe { std::slice::from_raw_parts_mut(raw.as_ptr() as *mut u8, raw.len()) };
            getrandom::fill(bytes).map_err(|e| type_error(&ctx, &format!("no randomness: {e}")))
        },
    )?;
    set_fn(obj, "randomUUID", || uuid::Uuid::new_v4().to_string())?;

    // urlParse(input, base?) -> parts, or null when invalid.
    set_fn(
        obj,
        "urlParse",
        |input: String, base: Opt<String>| -> Option<Vec<String>> {
            let parsed = match base.0 {
                Some(b) => url::Url::parse(&b).ok()?.join(&input).ok()?,
                None => url::Url::parse(&input).ok()?,
            };
            Some(url_parts(&parsed))
        },
    )?;
    // urlSet(href, part, value) -> new parts (the WHATWG setters; a setter
    // that rejects the value leaves the URL unchanged).
    set_fn(
        obj,
        "urlSet",
        |ctx: Ctx<'js>, href: String, part: String, value: String| -> Result<Vec<String>> {
            use url::quirks as q;
            let mut u = url::Url::parse(&href)
                .map_err(|e| type_error(&ctx, &format!("Invalid URL: {e}")))?;
            match part.as_str() {
                "href" => {
                    u = url::Url::parse(&value)
                        .map_err(|_| type_error(&ctx, &format!("Invalid URL: {value}")))?;
                }
                "protocol" => drop(q::set_protocol(&mut u, &value)),
                "username" => drop(q::set_username(&mut u, &value)),
                "password" => drop(q::set_password(&mut u, &value)),
                "host" => drop(q::set_host(&mut u, &value)),
                "hostname" => drop(q::set_hostname(&mut u, &value)),
                "port" => drop(q::set_port(&mut u, &value)),
                "pathname" => q::set_pathname(&mut u, &value),
                "search" => q::set_search(&mut u, &value),
                "hash" => q::set_hash(&mut u, &value),
                other => return Err(type_error(&ctx, &format!("unknown URL part {other}"))),
            }
            Ok(url_parts(&u))
        },
    )?;
    // application/x-www-form-urlencoded, as URLSearchParams uses it.
    set_fn(obj, "formParse", |s: String| -> Vec<Vec<String>> {
        url::form_urlencoded::parse(s.as_bytes())
            .map(|(k, v)| vec![k.into_owned(), v.into_owned()])
            .collect()
    })?;
    set_fn(obj, "formSerialize", |pairs: Vec<Vec<String>>| -> String {
        let mut ser = url::form_urlencoded::Serializer::new(String::new());
        for p in &pairs {
            if let [k, v] = p.as_slice() {
                ser.append_pair(k, v);
            }
        }
        ser.finish()
    })?;

    let s = st.clone();
    // fetch(url, method, headers, body) -> [status, statusText, headers, body, url]
    set_fn(
        obj,
        "fetch",
        move |ctx: Ctx<'js>,
              url: String,
              method: String,
              headers: Vec<Vec<String>>,
              body: Opt<Value<'js>>|
              -> Result<Vec<Value<'js>>> {
            let body = match body.0 {
                Some(b) if !b.is_undefined() && !b.is_null() => {
                    with_bytes(&ctx, &b, |b| b.to_vec())?
                }
                _ => Vec::new(),
            };
            let headers = headers
                .into_iter()
                .filter_map(|p| match <[String; 2]>::try_from(p) {
                    Ok([k, v]) => Some((k, v)),
                    Err(_) => None,
                })
                .collect();
            let req = FetchRequest {
                url,
                method,
                headers,
                body,
                deadline: s.stop.deadline,
            };
            match s.fetcher.fetch(req) {
                Ok(r) => {
                    let headers: Vec<Vec<String>> =
                        r.headers.into_iter().map(|(k, v)| vec![k, v]).collect();
                    Ok(vec![
                        rquickjs::IntoJs::into_js(r.status as i32, &ctx)?,
                        rquickjs::IntoJs::into_js(r.status_text, &ctx)?,
                        rquickjs::IntoJs::into_js(headers, &ctx)?,
                        u8_array(&ctx, r.body)?,
                        rquickjs::IntoJs::into_js(r.url, &ctx)?,
                    ])
                }
                Err(e) => {
                    let msg = e.to_string();
                    let err = Exception::from_message(ctx.clone(), &msg)?;
                    let code = match e {
                        FetchError::Denied(_) => "EGRESS_DENIED",
                        FetchError::Failed(_) => "FETCH_FAILED",
                    };
                    err.as_object().set("code", code)?;
                    Err(err.throw())
                }
            }
        },
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lenient_decoders() {
        assert_eq!(base64_decode_lenient("aGVsbG8="), b"hello");
        assert_eq!(base64_decode_lenient("aGVs bG8"), b"hello");
        assert_eq!(base64_decode_lenient("_-8"), vec![0xff, 0xef]);
        assert_eq!(hex_decode_lenient("68656c6c6fzz00"), b"hello");
        assert_eq!(hex_encode(b"\x00\xff"), "00ff");
    }
}
