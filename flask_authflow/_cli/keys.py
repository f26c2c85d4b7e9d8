"""``rotate-key`` and ``mint``: the local issuer's keys and tokens."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import click

from flask_authflow._cli.base import CommandFailed, authflow_cli, emit, json_option
from flask_authflow._web.state import get_state


def _issuer() -> Any:
    state = get_state()
    issuer = state.issuer
    if issuer is None:
        raise CommandFailed(
            "the local issuer is off: set AUTHFLOW_ISSUER (and AUTHFLOW_ISSUER_KEY_STORE)", "issuer_off"
        )
    if state.config.issuer.key_store == "memory":  # the configuration says which store init_app built
        # Each CLI run would get its own throwaway key: no server would ever see it.
        raise CommandFailed(
            "AUTHFLOW_ISSUER_KEY_STORE='memory' keeps keys in this process only: this command "
            "would use a throwaway key that no server ever sees. Use 'sql' (the default) or "
            "'file:<directory>'",
            "configuration_error",
        )
    return issuer


@authflow_cli.command("rotate-key")
@click.option(
    "--algorithm",
    type=click.Choice(["ES256", "RS256"]),
    help="Algorithm of the new key (default: AUTHFLOW_ISSUER_ALGORITHM).",
)
@click.option("--kid", help="Key id for the new key (default: its RFC 7638 thumbprint).")
@click.option(
    "--stage", "step", flag_value="stage", help="Publish a new key in the JWKS without signing with it."
)
@click.option(
    "--activate",
    "step",
    flag_value="activate",
    help="Sign with the staged key (published for >= the max-age).",
)
@click.option(
    "--prune", "step", flag_value="prune", help="Unpublish retired keys whose tokens have all expired."
)
@click.option(
    "--force", is_flag=True, help="Skip the wait: activate early, or rotate at once without staging."
)
@json_option
def rotate_key(algorithm: str | None, kid: str | None, step: str | None, force: bool, as_json: bool) -> None:
    """Rotate the issuer's signing key.

    The safe procedure relying parties can follow: ``--stage`` publishes the next key;
    after AUTHFLOW_ISSUER_JWKS_MAX_AGE, ``--activate`` (or plain ``rotate-key``) signs
    with it; later ``--prune`` removes retired keys whose longest token has expired.
    Plain ``rotate-key`` with nothing staged is refused unless ``--force`` (a new key
    that signs at once: relying parties with a cached JWKS must refetch).
    """
    from flask_authflow.issuer import LocalIdpSigningKey

    issuer = _issuer()
    document: dict[str, Any]
    if step == "prune":
        pruned = issuer.prune_retired_keys()
        text = f"pruned {len(pruned)} retired key(s){': ' + ', '.join(pruned) if pruned else ''}"
        document = {"action": "pruned", "pruned": pruned}
    elif step == "activate" or (step is None and issuer.rotation_state().staged_kid is not None):
        new_kid = issuer.activate_staged_key(force=force)
        text = f"new current key {new_kid}; the JWKS has {len(issuer.jwks()['keys'])} key(s)"
        document = {"action": "activated", "kid": new_kid, "algorithm": issuer.algorithm}
    else:
        # Relying parties pin the algorithm they were told about: keep it unless asked.
        key = LocalIdpSigningKey.generate(algorithm or get_state().config.issuer.algorithm)
        if kid is not None:
            key = key.with_key_id(kid)
        if step == "stage":
            issuer.stage_signing_key(key)
            wait = issuer.jwks_max_age
            text = f"staged key {key.kid} ({key.algorithm}); activate it with rotate-key after {wait}"
            document = {
                "action": "staged",
                "kid": key.kid,
                "algorithm": key.algorithm,
                "activate_after_seconds": int(wait.total_seconds()),
            }
        elif not force:
            raise CommandFailed(
                "nothing is staged: run rotate-key --stage, wait AUTHFLOW_ISSUER_JWKS_MAX_AGE, then "
                "rotate-key (or --force to sign with a new key at once)",
                "nothing_staged",
            )
        else:
            issuer.rotate_signing_key(key)
            size = len(issuer.jwks()["keys"])
            text = f"new current key {key.kid} ({key.algorithm}); the JWKS now has {size} key(s)"
            document = {"action": "rotated", "kid": key.kid, "algorithm": key.algorithm}
    emit(as_json, {**document, "jwks_keys": len(issuer.jwks()["keys"])}, text)


def _parse_claim(text: str) -> tuple[str, Any]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise click.BadParameter(f"{text!r} is not k=v", param_hint="--claim")
    try:
        return name, json.loads(value)
    except ValueError:
        return name, value


@authflow_cli.command("mint")
@click.option("--sub", "subject", required=True, help="Subject of the token.")
@click.option("--aud", "audiences", required=True, multiple=True, help="Audience (repeat for several).")
@click.option(
    "--ttl", type=click.IntRange(min=1), default=300, show_default=True, help="Lifetime in seconds."
)
@click.option("--claim", "claims", multiple=True, help="Extra claim k=v (v parsed as JSON when it is JSON).")
@json_option
def mint(subject: str, audiences: tuple[str, ...], ttl: int, claims: tuple[str, ...], as_json: bool) -> None:
    """Mint a token with the current key and print it."""
    from flask_authflow.issuer import MintClaims

    issuer = _issuer()
    exp = issuer.clock.now() + timedelta(seconds=ttl)
    request = MintClaims(subject, exp).with_audiences(audiences)
    for item in claims:
        name, value = _parse_claim(item)
        request = request.with_custom_claim(name, value)
    minted = issuer.mint_with_details(request)
    emit(
        as_json,
        {
            "token": minted.token,
            "kid": minted.key_id,
            "algorithm": minted.algorithm,
            "claims": dict(minted.claims),
        },
        minted.token,
    )
