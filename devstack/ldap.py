"""An OpenLDAP server (Debian's `slapd`) of the project's own: its own config, data, TLS certificate and port
under the state folder, started as a plain process and stopped by its recorded PID, never the system service.

The SSO tests start one per run (tests/sso/conftest.py). The
directory holds `ou=people` (inetOrgPerson users), `ou=groups` (groupOfNames) and a service account the
control plane binds as; the admin (root DN) and service passwords are secret files of the state folder.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import ipaddress
import logging
import os
import secrets
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from broker_core.secret_source import read_secret_file
from devstack import services
from devstack.processes import ServiceError, port_open, read_pid, spawn, stop_pid, wait_until

log = logging.getLogger("devstack")

SLAPD = Path(os.environ.get("SWITCHYARD_SLAPD", "/usr/sbin/slapd"))
SLAPADD = SLAPD.parent / "slapadd"
SCHEMA_DIR = Path("/etc/ldap/schema")
MODULE_DIR = Path("/usr/lib/ldap")
SUFFIX = "dc=switchyard,dc=test"
ADMIN_DN = f"cn=admin,{SUFFIX}"
SERVICE_DN = f"cn=switchyard,ou=services,{SUFFIX}"
PEOPLE = f"ou=people,{SUFFIX}"
GROUPS = f"ou=groups,{SUFFIX}"


@dataclass(frozen=True)
class Directory:
    """How to reach a running directory: its URI, DNs, and the files of its passwords and CA certificate."""

    uri: str
    suffix: str
    admin_dn: str
    admin_password_file: Path
    service_dn: str
    service_password_file: Path
    ca_file: Path

    def control_plane_environment(self) -> dict[str, str]:
        """SWITCHYARD_LDAP_* for a control plane that logs people in through this directory."""
        return {
            "SWITCHYARD_LDAP_SERVER_URI": self.uri,
            "SWITCHYARD_LDAP_BIND_DN": self.service_dn,
            "SWITCHYARD_LDAP_BIND_PASSWORD_FILE": str(self.service_password_file),
            "SWITCHYARD_LDAP_USER_SEARCH_BASE": PEOPLE,
            # a disabled user (employeeType=disabled) is outside the search: no login, and the sync deactivates it
            "SWITCHYARD_LDAP_USER_FILTER": "(&(objectClass=inetOrgPerson)(uid=%(user)s)(!(employeeType=disabled)))",
            "SWITCHYARD_LDAP_GROUP_SEARCH_BASE": GROUPS,
            "SWITCHYARD_LDAP_GROUP_TYPE": "groupOfNames",
            "SWITCHYARD_LDAP_CA_FILE": str(self.ca_file),
        }


def ssha(password: str) -> str:
    """The {SSHA} form of a password for slapd's config (the password itself is never written there)."""
    salt = secrets.token_bytes(8)
    return "{SSHA}" + base64.b64encode(hashlib.sha1(password.encode() + salt).digest() + salt).decode()


def _certificate(folder: Path) -> tuple[Path, Path, Path]:
    """A CA and a server certificate for 127.0.0.1 (StartTLS), made once per state folder."""
    ca_file, cert_file, key_file = folder / "ca.pem", folder / "server.pem", folder / "server.key"
    if ca_file.exists() and cert_file.exists() and key_file.exists():
        return ca_file, cert_file, key_file
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Switchyard test LDAP CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
          .not_valid_after(now + datetime.timedelta(days=3650))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=3650))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                                                        x509.DNSName("localhost")]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    ca_file.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    return ca_file, cert_file, key_file


def _config(folder: Path, admin_password: str, service_password: str) -> str:
    ca_file, cert_file, key_file = _certificate(folder)
    return "\n".join([
        *(f"include {SCHEMA_DIR / name}.schema" for name in ("core", "cosine", "inetorgperson")),
        f"modulepath {MODULE_DIR}",
        "moduleload back_mdb",
        f"pidfile {folder / 'slapd.pid'}",
        f"argsfile {folder / 'slapd.args'}",
        f"TLSCACertificateFile {ca_file}",
        f"TLSCertificateFile {cert_file}",
        f"TLSCertificateKeyFile {key_file}",
        "database mdb",
        "maxsize 67108864",
        f'suffix "{SUFFIX}"',
        f'rootdn "{ADMIN_DN}"',
        f"rootpw {ssha(admin_password)}",
        f"directory {folder / 'data'}",
        "access to attrs=userPassword by self write by anonymous auth by * none",
        f'access to * by dn.exact="{SERVICE_DN}" read by self read by * none',
        "",
    ])


def _seed(service_password: str) -> str:
    entries = [
        f"dn: {SUFFIX}\nobjectClass: dcObject\nobjectClass: organization\ndc: switchyard\no: Switchyard test",
        f"dn: ou=people,{SUFFIX}\nobjectClass: organizationalUnit\nou: people",
        f"dn: ou=groups,{SUFFIX}\nobjectClass: organizationalUnit\nou: groups",
        f"dn: ou=services,{SUFFIX}\nobjectClass: organizationalUnit\nou: services",
        f"dn: {SERVICE_DN}\nobjectClass: organizationalRole\nobjectClass: simpleSecurityObject\ncn: switchyard\n"
        f"userPassword: {ssha(service_password)}",
    ]
    return "\n\n".join(entries) + "\n"


def start_slapd(state: Path, port: int, fresh: bool = False) -> Directory:
    """Start (or find running) this state folder's slapd on 127.0.0.1:port; `fresh` starts from an empty
    directory (the seed entries only). Ready when it answers on the port."""
    folder = state / "slapd"
    admin_password = read_secret_file(services.secret_file(state, "ldap-admin-password"))
    service_password = read_secret_file(services.secret_file(state, "ldap-service-password"))
    pidfile = state / "pids" / "slapd.pid"
    if fresh:
        stop_pid(pidfile, "slapd")
        shutil.rmtree(folder / "data", ignore_errors=True)
    (folder / "data").mkdir(parents=True, exist_ok=True)
    conf = folder / "slapd.conf"
    conf.write_text(_config(folder, admin_password, service_password))
    conf.chmod(0o600)
    directory = Directory(uri=f"ldap://127.0.0.1:{port}", suffix=SUFFIX, admin_dn=ADMIN_DN,
                          admin_password_file=services.secret_file(state, "ldap-admin-password"), service_dn=SERVICE_DN,
                          service_password_file=services.secret_file(state, "ldap-service-password"),
                          ca_file=folder / "ca.pem")
    if read_pid(pidfile) and port_open(port):
        return directory
    if port_open(port):
        raise ServiceError(f"port {port} is taken by another process: stop it, or choose other ports with "
                                    "SWITCHYARD_PORT_BASE")
    if not SLAPD.exists():
        raise ServiceError(f"{SLAPD} is missing: install Debian's slapd package (./dev does)")
    if not (folder / "data" / "data.mdb").exists():
        seeded = subprocess.run([str(SLAPADD), "-f", str(conf), "-b", SUFFIX], input=_seed(service_password),
                                capture_output=True, text=True)
        if seeded.returncode != 0:
            raise ServiceError(f"slapadd failed: {seeded.stderr.strip()}")
    # -d 0: stay in the foreground (spawn records this PID); logs go to state/logs/slapd.log
    spawn("slapd", [str(SLAPD), "-d", "0", "-h", f"ldap://127.0.0.1:{port}/", "-f", str(conf)], state)
    wait_until(lambda: port_open(port), 20, f"slapd on {port} (log: {state / 'logs' / 'slapd.log'})")
    return directory


def stop_slapd(state: Path) -> None:
    stop_pid(state / "pids" / "slapd.pid", "slapd")

