//! A certificate authority made for a test (rcgen), and leaf
//! certificates it signs.

#![allow(dead_code)]

/// A CA: its certificate (PEM) and what signs with it.
pub struct TestCa {
    pub pem: String,
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
}

/// A new self-signed CA named `name`.
pub fn test_ca(name: &str) -> TestCa {
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name);
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = params.self_signed(&key).unwrap();
    TestCa {
        pem: cert.pem(),
        issuer: rcgen::Issuer::new(params, key),
    }
}

impl TestCa {
    /// A leaf certificate for `names`: (certificate PEM, key PEM).
    pub fn issue(&self, names: &[&str]) -> (String, String) {
        let params =
            rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    }
}
