"""The WebSocket server protocol the node serves with: uvicorn's websockets-sansio protocol with two
answers to bad input that uvicorn leaves out (uvicorn 0.54, websockets 17).

- A handshake websockets refuses (a request line over 8 KiB, a header line over 8 KiB or more than
  128 headers, a request it cannot parse): websockets writes the 414 / 431 answer, or gives up,
  but uvicorn never sends that answer nor closes, so the client waited for ever and the connection
  stayed open. Here the answer is sent and the connection closed.
- A text frame that is not UTF-8: uvicorn closes it with 1007 (right) and logs a traceback at
  ERROR; here it is one line at WARNING naming the client.
"""

from __future__ import annotations

import logging

from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

log = logging.getLogger("jobdeck.api")


class WebSocketProtocol(WebSocketsSansIOProtocol):
    """uvicorn's sansio WebSocket protocol that answers every handshake it cannot accept."""

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if not self.handshake_initiated and self.conn.handshake_exc is not None and not self.transport.is_closing():
            self.transport.write(b"".join(self.conn.data_to_send()))
            self.transport.close()

    def send_receive_event_to_app(self) -> None:
        if self.curr_msg_data_type == "text" and not self.close_sent:
            try:
                b"".join(self.frames).decode()
            except UnicodeDecodeError:
                self.frames = []
                client = f"{self.client[0]}:{self.client[1]}" if self.client else "a client"
                log.warning("closed the WebSocket of %s: a text message that is not UTF-8 (1007)", client)
                self.conn.send_close(1007, "a text message that is not UTF-8")
                self.handle_parser_exception()
                return
        super().send_receive_event_to_app()
