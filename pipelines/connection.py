"""Reaching a Data Science Pipelines server: where it is, who you are, and a clear error
naming the fix when the answer is not the KFP API.

- Host: --host, else $KFP_HOST, else the DSPA's Route in the namespace (route
  `ds-pipeline-<dspa>`, read through the Kubernetes API with the current kubeconfig).
- Token: $KFP_TOKEN, else a token file (--token-file or $KFP_TOKEN_FILE), else the current
  kubeconfig's user token (what `oc login` writes). Never a command-line value: argv shows
  in `ps` and in shell history.
- CA: --ca-bundle (or $KFP_CA_BUNDLE) for a route whose certificate the system does not trust.

The DSPA's route has an auth proxy in front of the API. On RHOAI 2.x it is oauth-proxy: a
missing, expired or refused token gets its HTML login page (403), never a JSON error; a
client that follows a redirect ends on that page with 200. RHOAI 3.x's kube-rbac-proxy
answers 401/403 in plain text. `check` tells each of these apart from the API."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path

HEALTHZ = "/apis/v2beta1/healthz"
ROUTE_PREFIX = "ds-pipeline-"  # DSPO names the API's route ds-pipeline-<dspa>
DSPA = ("datasciencepipelinesapplications.opendatahub.io", "v1", "datasciencepipelinesapplications")
TIMEOUT = (5.0, 30.0)  # connect, read
RETRIES = 2  # more tries on a refused or reset connection, backing off


class ConnectionProblem(Exception):
    """The server could not be used: what was seen, and what to do about it."""


@dataclass
class Connection:
    host: str
    token: str | None
    ca_bundle: str | None
    token_from: str = ""  # where the token came from, for messages

    def client(self):
        """A kfp.Client on this connection (after `check`)."""
        import warnings

        import kfp

        with warnings.catch_warnings():  # "only works with KFP v2.0.0-beta.2 and later": DSP is
            warnings.simplefilter("ignore", FutureWarning)
            return kfp.Client(host=self.host, existing_token=self.token, ssl_ca_cert=self.ca_bundle)


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("connection (see `kfp-ray doctor`)")
    g.add_argument("--host", help="the DSPA route, https://ds-pipeline-<dspa>-<ns>.apps... "
                                  "(default: $KFP_HOST, else found from the namespace's DSPA)")
    g.add_argument("--namespace", "-n", help="where to look for the DSPA (default: the kubeconfig context's)")
    g.add_argument("--token-file", help="a file holding the bearer token (default: $KFP_TOKEN, $KFP_TOKEN_FILE, "
                                        "else the kubeconfig's, as `oc login` leaves it); never the token itself")
    g.add_argument("--ca-bundle", help="CA certificates (PEM) to trust for the route (default: $KFP_CA_BUNDLE, "
                                       "else the system's)")


def resolve(args) -> Connection:
    """Host, token and CA from the arguments, the environment and the kubeconfig."""
    token, token_from = _token(getattr(args, "token_file", None))
    host = getattr(args, "host", None) or os.environ.get("KFP_HOST") or _route_host(getattr(args, "namespace", None))
    if not host.startswith(("https://", "http://")):
        host = "https://" + host
    ca = getattr(args, "ca_bundle", None) or os.environ.get("KFP_CA_BUNDLE") or None
    if ca and not Path(ca).is_file():
        raise ConnectionProblem(f"--ca-bundle {ca}: no such file; give the PEM file of the CA that signed the route's "
                                "certificate")
    return Connection(host.rstrip("/"), token, ca, token_from)


def _token(token_file: str | None) -> tuple[str | None, str]:
    if os.environ.get("KFP_TOKEN"):
        return os.environ["KFP_TOKEN"].strip(), "$KFP_TOKEN"
    path = token_file or os.environ.get("KFP_TOKEN_FILE")
    if path:
        try:
            return Path(path).read_text().strip(), f"token file {path}"
        except OSError as exc:
            # the path is not echoed: a token given by mistake in its place would be printed
            raise ConnectionProblem(f"the token file cannot be read ({exc.strerror}): give --token-file (or "
                                    "$KFP_TOKEN_FILE) the path of a file holding the token, `oc whoami -t > FILE`, "
                                    "or set $KFP_TOKEN") from None
    try:
        from kubernetes import client, config

        cfg = client.Configuration()
        config.load_kube_config(config_file=kubeconfig_path(), client_configuration=cfg)
        bearer = (cfg.api_key or {}).get("authorization", "")
        if bearer.lower().startswith("bearer "):
            return bearer.split(" ", 1)[1], "the kubeconfig's user"
    except Exception:  # noqa: BLE001 - no kubeconfig: the server may still be open
        pass
    return None, ""


def _route_host(namespace: str | None) -> str:
    """The DSPA API route's host, found through the Kubernetes API."""
    try:
        from kubernetes import client, config

        config.load_kube_config(config_file=kubeconfig_path())
        ns = namespace or config.list_kube_config_contexts(config_file=kubeconfig_path())[1]["context"].get("namespace") or "default"
        co = client.CustomObjectsApi()
        dspas = [d["metadata"]["name"] for d in
                 co.list_namespaced_custom_object(*DSPA[:2], ns, DSPA[2], _request_timeout=TIMEOUT)["items"]]
        routes = {r["metadata"]["name"]: r for r in co.list_namespaced_custom_object(
            "route.openshift.io", "v1", ns, "routes", _request_timeout=TIMEOUT)["items"]}
    except Exception as exc:  # noqa: BLE001 - said with the fix
        raise ConnectionProblem(f"no --host or $KFP_HOST, and the DSPA route could not be read through the Kubernetes "
                                f"API ({_one_line(exc)}); give --host https://<route host> "
                                "(`oc get route -n <namespace> ds-pipeline-<dspa>`)") from None
    for name in dspas:
        route = routes.get(ROUTE_PREFIX + name)
        if route and route.get("spec", {}).get("host"):
            return route["spec"]["host"]
    where = f"namespace {ns}"
    if not dspas:
        raise ConnectionProblem(f"no DataSciencePipelinesApplication in {where}: configure a pipeline server "
                                "(OpenShift AI dashboard > Data Science Pipelines) or give --host / $KFP_HOST")
    raise ConnectionProblem(f"the DSPA {dspas[0]} in {where} has no route {ROUTE_PREFIX}{dspas[0]}: give --host / $KFP_HOST")


def check(conn: Connection) -> dict:
    """GET healthz through the route; its JSON, or ConnectionProblem saying what answered."""
    import time

    import requests

    headers = {"Authorization": f"Bearer {conn.token}"} if conn.token else {}
    verify = conn.ca_bundle or True
    for attempt in range(RETRIES + 1):
        try:
            r = requests.get(conn.host + HEALTHZ, headers=headers, verify=verify, timeout=TIMEOUT)
            break
        except requests.exceptions.SSLError as exc:
            raise ConnectionProblem(
                f"TLS with {conn.host} failed ({_one_line(exc)}): its certificate is not signed by a CA this "
                "machine trusts; give --ca-bundle (or $KFP_CA_BUNDLE) with the cluster's ingress CA") from None
        except requests.exceptions.ConnectionError as exc:
            if attempt == RETRIES:
                raise ConnectionProblem(f"cannot reach {conn.host} ({_one_line(exc)}); check --host / $KFP_HOST: "
                                        "the DSPA route, `oc get route -n <namespace> ds-pipeline-<dspa>`") from None
            time.sleep(0.5 * 2 ** attempt)
        except requests.exceptions.Timeout:
            raise ConnectionProblem(f"{conn.host} did not answer within {TIMEOUT[1]:.0f}s; check --host and the "
                                    "DSPA's API server pod (`oc get pods -l app=ds-pipeline-<dspa>`)") from None
    kind = r.headers.get("content-type", "")
    login = "text/html" in kind or r.text.lstrip()[:15].lower().startswith(("<!doctype html", "<html"))
    who = f"the token from {conn.token_from}" if conn.token else "no token"
    if login:
        why = (f"{who} was not accepted (expired, revoked, or not allowed to get the DSPA route)" if conn.token else
               "no token was sent (none in $KFP_TOKEN, --token-file, $KFP_TOKEN_FILE or the kubeconfig)")
        raise ConnectionProblem(f"{conn.host} answered the OpenShift login page (HTTP {r.status_code}), not the pipelines "
                                f"API: {why}. Log in with `oc login`, or set $KFP_TOKEN to a fresh `oc whoami -t`")
    if r.status_code == 401:
        raise ConnectionProblem(f"{conn.host} refused {who} (401 Unauthorized): it is missing, invalid or expired; "
                                "log in again with `oc login` or set $KFP_TOKEN to a fresh `oc whoami -t`")
    if r.status_code == 403:
        raise ConnectionProblem(f"{conn.host} forbids {who} (403: {r.text.strip()[:160]}): ask for the DSPA's user "
                                "role in the namespace (ds-pipeline-user-access-<dspa>)")
    if r.status_code != 200:
        raise ConnectionProblem(f"{conn.host}{HEALTHZ} answered HTTP {r.status_code}: {r.text.strip()[:200]}")
    try:
        return r.json()
    except ValueError:
        raise ConnectionProblem(f"{conn.host}{HEALTHZ} answered something that is not JSON "
                                f"({kind or 'no content type'}): is --host the DSPA's API route?") from None


def connect(args):
    """A checked kfp.Client for the command's arguments."""
    conn = resolve(args)
    check(conn)
    return conn.client()


def kubeconfig_path() -> str | None:
    """$KUBECONFIG as it is now (the kubernetes client reads it once, at import)."""
    return os.environ.get("KUBECONFIG") or None


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[-1] if text else type(exc).__name__)[:200]
