"""RocketMQ's remoting module (``rocketmq-remoting``): the wire protocol every RocketMQ client,
name server, broker and admin tool speaks. See docs/remoting.md."""

from dledger.rocketmq.remoting.language_code import LanguageCode
from dledger.rocketmq.remoting.netty_decoder import FRAME_MAX_LENGTH, FrameTooLong, NettyDecoder
from dledger.rocketmq.remoting.remoting_command import RemotingCommand
from dledger.rocketmq.remoting.remoting_command_exception import RemotingCommandException
from dledger.rocketmq.remoting.request_code import RequestCode
from dledger.rocketmq.remoting.response_code import ResponseCode
from dledger.rocketmq.remoting.serialize_type import SerializeType

__all__ = [
    "FRAME_MAX_LENGTH",
    "FrameTooLong",
    "LanguageCode",
    "NettyDecoder",
    "RemotingCommand",
    "RemotingCommandException",
    "RequestCode",
    "ResponseCode",
    "SerializeType",
]
