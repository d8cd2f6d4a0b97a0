//! Where backups go: the `--backup URL` of `node-agent local` and the
//! chart's `backup.url`.
//!
//! Two forms:
//! - `s3://BUCKET/PREFIX`: an S3-compatible bucket. The endpoint, region and
//!   keys come from the standard variables of the AWS SDKs and CLI
//!   (`AWS_ENDPOINT_URL`, `AWS_REGION` or `AWS_DEFAULT_REGION`,
//!   `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`; see the AWS SDKs and
//!   Tools Reference Guide, "Environment variables"). Without
//!   `AWS_ENDPOINT_URL` the endpoint is AWS's regional one.
//! - `file:///DIR`: a directory on this machine (one machine, and tests).

use std::path::PathBuf;

/// A parsed backup URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BackupUrl {
    /// `s3://BUCKET/PREFIX`; `prefix` has no leading or trailing `/` and may be empty.
    S3 { bucket: String, prefix: String },
    /// `file:///DIR`, an absolute directory.
    Dir(PathBuf),
}

impl BackupUrl {
    /// Parses `s3://BUCKET[/PREFIX]` or `file:///DIR`.
    ///
    /// Errors: a message naming what is wrong (an unknown scheme, an empty
    /// or invalid bucket name, a relative or non-local `file:` URL).
    pub fn parse(text: &str) -> Result<BackupUrl, String> {
        if let Some(rest) = text.strip_prefix("s3://") {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            if !valid_bucket(bucket) {
                return Err(format!(
                    "{text}: \"{bucket}\" is not a bucket name (up to 63 lower-case letters, digits, '.', '-' and '_', starting and ending with a letter or digit)"
                ));
            }
            let prefix = prefix.trim_matches('/');
            if prefix.split('/').any(|p| p == "." || p == "..") || prefix.contains("//") {
                return Err(format!(
                    "{text}: the prefix may not hold empty, '.' or '..' parts"
                ));
            }
            return Ok(BackupUrl::S3 {
                bucket: bucket.to_string(),
                prefix: prefix.to_string(),
            });
        }
        if let Some(rest) = text.strip_prefix("file://") {
            if !rest.starts_with('/') {
                return Err(format!(
                    "{text}: a file URL names an absolute directory on this machine, as file:///var/backups"
                ));
            }
            return Ok(BackupUrl::Dir(PathBuf::from(rest)));
        }
        Err(format!(
            "{text}: a backup URL is s3://BUCKET/PREFIX or file:///DIRECTORY"
        ))
    }
}

impl BackupUrl {
    /// Why a store may refuse this URL's bucket although it parses: AWS's
    /// naming rules (3-63 characters, no `_`; AWS S3 User Guide, "General
    /// purpose bucket naming rules"), which AWS, versitygw and MinIO
    /// enforce when a bucket is made. `None` for names within those rules
    /// and for `file:` URLs. Shown beside a store's error at start.
    pub fn naming_hint(&self) -> Option<String> {
        let BackupUrl::S3 { bucket, .. } = self else {
            return None;
        };
        let short = bucket.len() < 3;
        let underscore = bucket.contains('_');
        (short || underscore).then(|| {
            format!(
                "bucket \"{bucket}\" {}: S3 and most S3-compatible stores refuse to make such a bucket (names are 3 to 63 lower-case letters, digits, '.' and '-'); use a bucket that exists, such as s3://backups/PREFIX",
                if short { "is shorter than 3 characters" } else { "holds '_'" }
            )
        })
    }
}

impl std::fmt::Display for BackupUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BackupUrl::S3 { bucket, prefix } if prefix.is_empty() => write!(f, "s3://{bucket}"),
            BackupUrl::S3 { bucket, prefix } => write!(f, "s3://{bucket}/{prefix}"),
            BackupUrl::Dir(dir) => write!(f, "file://{}", dir.display()),
        }
    }
}

/// A bucket name S3-compatible stores may accept: AWS's rules (AWS S3 User
/// Guide, "General purpose bucket naming rules": 3-63 lower-case letters,
/// digits, `.` and `-`, starting and ending with a letter or digit),
/// relaxed to any length from 1 and `_`, which other stores allow; the
/// store itself refuses what it does not.
fn valid_bucket(b: &str) -> bool {
    (1..=63).contains(&b.len())
        && b.bytes().all(|c| {
            c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'.' || c == b'-' || c == b'_'
        })
        && b.as_bytes()[0].is_ascii_alphanumeric()
        && b.as_bytes()[b.len() - 1].is_ascii_alphanumeric()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn s3_and_file_urls_parse_and_bad_ones_say_why() {
        assert_eq!(
            BackupUrl::parse("s3://my-bucket/team/a/").unwrap(),
            BackupUrl::S3 {
                bucket: "my-bucket".into(),
                prefix: "team/a".into()
            }
        );
        assert_eq!(
            BackupUrl::parse("s3://b12").unwrap(),
            BackupUrl::S3 {
                bucket: "b12".into(),
                prefix: String::new()
            }
        );
        assert_eq!(
            BackupUrl::parse("file:///var/backups").unwrap(),
            BackupUrl::Dir("/var/backups".into())
        );
        for (bad, says) in [
            ("s3://B/x", "not a bucket name"),
            ("s3://a b/x", "not a bucket name"),
            ("s3:///x", "not a bucket name"),
            ("s3://bucket/a/../b", "'..'"),
            ("file://relative/dir", "absolute directory"),
            ("http://x/y", "s3://BUCKET/PREFIX"),
            ("", "s3://BUCKET/PREFIX"),
        ] {
            let e = BackupUrl::parse(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
        assert_eq!(
            BackupUrl::parse("s3://bk1/p/q").unwrap().to_string(),
            "s3://bk1/p/q"
        );
    }

    #[test]
    fn bucket_names_outside_aws_rules_get_a_hint() {
        let hint = |u: &str| BackupUrl::parse(u).unwrap().naming_hint();
        assert!(
            hint("s3://b/p")
                .unwrap()
                .contains("shorter than 3 characters")
        );
        assert!(hint("s3://my_bucket/p").unwrap().contains("holds '_'"));
        assert_eq!(hint("s3://backups/p"), None);
        assert_eq!(hint("file:///var/backups"), None);
    }
}
