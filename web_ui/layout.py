"""The frame around every page: navigation, the core's status, who is signed in, the theme."""

from __future__ import annotations

import reflex as rx

from web_ui.state import AppState

NAV = (
    ("Overview", "/", "layout-dashboard"),
    ("Jobs", "/jobs", "list"),
    ("Queues", "/queues", "layers"),
    ("Agents", "/agents", "server"),
    ("Schedules", "/schedules", "calendar-clock"),
    ("Workflows", "/workflows", "workflow"),
    ("Dead letters", "/dead", "skull"),
    ("Audit log", "/audit", "scroll-text"),
    ("Notifications", "/notifications", "bell"),
)


def _nav_link(label: str, href: str, icon: str) -> rx.Component:
    link = rx.link(
        rx.hstack(rx.icon(icon, size=16, aria_hidden="true"), rx.text(label), spacing="2", align="center"),
        href=href,
        underline="none",
        color_scheme="gray",
        high_contrast=True,
        padding_x="0.75rem",
        padding_y="0.4rem",
        border_radius="6px",
        width="100%",
        _hover={"background": rx.color("gray", 4)},
        id=f"nav-{href.strip('/') or 'overview'}",
    )
    if href == "/audit":
        return rx.cond(AppState.can_read_audit, link, rx.fragment())
    if href == "/notifications":
        return rx.cond(AppState.can_manage_notifications, link, rx.fragment())
    return link


def _status() -> rx.Component:
    return rx.cond(
        AppState.core_ok,
        rx.badge(
            rx.icon("radio", size=14, aria_hidden="true"),
            rx.text("live · event #", rx.text.span(AppState.last_seq, id="live-seq")),
            color_scheme="green",
            variant="soft",
            id="core-status",
            aria_live="polite",
        ),
        rx.badge(
            rx.icon("unplug", size=14, aria_hidden="true"),
            "core unreachable — reconnecting",
            color_scheme="red",
            variant="solid",
            id="core-status",
            role="status",
        ),
    )


def _sign_in() -> rx.Component:
    return rx.popover.root(
        rx.popover.trigger(rx.button("Sign in", size="1", id="sign-in")),
        rx.popover.content(
            rx.vstack(
                rx.cond(
                    AppState.web_login,
                    # a plain anchor styled as a button: a full navigation to the core's sign-in
                    rx.button(
                        rx.el.a("Sign in with single sign-on", href=AppState.sign_in_url, id="sign-in-sso"),
                        as_child=True,
                        width="100%",
                    ),
                    rx.fragment(),
                ),
                rx.form(
                    rx.vstack(
                        rx.el.label("Access token", html_for="signin-token", style={"font_size": "0.85rem"}),
                        rx.input(type="password", name="token", id="signin-token", width="100%", auto_complete="off"),
                        rx.button("Sign in with the token", type="submit", variant="soft", width="100%"),
                        spacing="2",
                        width="100%",
                    ),
                    on_submit=AppState.token_sign_in,
                    reset_on_submit=True,
                    width="100%",
                ),
                width="18rem",
                spacing="3",
            ),
        ),
    )


def _user() -> rx.Component:
    return rx.cond(
        AppState.signed_out,
        _sign_in(),
        rx.hstack(
            rx.cond(AppState.user_name != "", rx.text(AppState.user_name, size="2", id="user-name"), rx.fragment()),
            rx.badge(AppState.role, variant="outline", id="user-role"),
            rx.cond(
                AppState.has_session,
                # a full page load: the backend route clears the cookie (a router link would stay in the page)
                rx.button(
                    "Sign out",
                    size="1",
                    variant="ghost",
                    id="sign-out",
                    on_click=rx.call_script("window.location.assign('/auth/logout')"),
                ),
                rx.fragment(),
            ),
            spacing="2",
            align="center",
        ),
    )


def layout(title: str | rx.Var[str], *content: rx.Component) -> rx.Component:
    """A page: side navigation, a header with status, then `content`."""
    return rx.hstack(
        rx.el.nav(
            rx.vstack(
                rx.heading("JobDeck", size="5", padding_x="0.75rem", padding_bottom="0.75rem"),
                *(_nav_link(*item) for item in NAV),
                spacing="1",
                width="100%",
            ),
            aria_label="Main",
            style={
                "width": "13rem",
                "padding": "1rem 0.5rem",
                "min_height": "100vh",
                "border_right": f"1px solid {rx.color('gray', 5)}",
                "flex_shrink": "0",
            },
        ),
        rx.el.main(
            rx.vstack(
                rx.hstack(
                    rx.heading(title, size="6", as_="h1"),
                    rx.spacer(),
                    _status(),
                    _user(),
                    rx.tooltip(
                        rx.hstack(
                            rx.text("UTC", size="1", color_scheme="gray"),
                            rx.switch(
                                checked=AppState.show_utc,
                                on_change=AppState.toggle_utc,
                                size="1",
                                aria_label="Times in UTC",
                                id="utc-switch",
                            ),
                            align="center",
                            spacing="1",
                        ),
                        content="Times in " + AppState.zone_label + " (every time carries its zone)",
                    ),
                    rx.color_mode.switch(aria_label="Dark theme"),
                    width="100%",
                    align="center",
                    spacing="3",
                ),
                rx.cond(
                    AppState.core_ok,
                    rx.fragment(),
                    rx.callout(
                        rx.text(
                            "The JobDeck core cannot be reached: ",
                            AppState.core_error,
                            " — this page will catch up by itself when it is back.",
                        ),
                        icon="triangle-alert",
                        color_scheme="red",
                        width="100%",
                        id="core-down",
                        role="alert",
                    ),
                ),
                rx.cond(
                    AppState.alert_title != "",
                    rx.callout(
                        rx.hstack(
                            rx.text(AppState.alert_title, id="alert-title", weight="bold"),
                            rx.spacer(),
                            rx.button("Dismiss", size="1", variant="ghost", on_click=AppState.dismiss_alert),
                            width="100%",
                            align="center",
                        ),
                        icon=rx.cond(AppState.alert_kind == "resolved", "circle-check", "bell-ring"),
                        color_scheme=rx.cond(AppState.alert_kind == "resolved", "green", "red"),
                        width="100%",
                        id="alert-banner",
                        role="alert",
                    ),
                    rx.fragment(),
                ),
                rx.cond(
                    AppState.signin_error != "",
                    rx.callout(
                        AppState.signin_error,
                        icon="circle-x",
                        color_scheme="red",
                        id="signin-error",
                        role="alert",
                        width="100%",
                    ),
                    rx.fragment(),
                ),
                rx.cond(
                    AppState.signed_out,
                    rx.callout(
                        "Sign in to see and act on jobs: this core asks who you are.",
                        icon="lock",
                        color_scheme="gray",
                        width="100%",
                        id="signed-out",
                    ),
                    rx.fragment(),
                ),
                *content,
                spacing="4",
                width="100%",
            ),
            style={"flex": "1", "padding": "1.25rem 1.5rem", "min_width": "0"},
        ),
        spacing="0",
        align="start",
        width="100%",
    )
