"""RewrappingInterceptor: each method's handler is rebuilt once, not on every call."""

import grpc

from remotelog.rpc.handlers import RewrappingInterceptor


class Tagging(RewrappingInterceptor):
    """Rewraps a unary handler into one whose behavior tags the answer; counts rewraps."""

    def __init__(self) -> None:
        super().__init__()
        self.rewraps: list[str] = []

    def rewrap(self, handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
        self.rewraps.append(method)
        inner = handler.unary_unary
        return grpc.unary_unary_rpc_method_handler(
            lambda request, context: (method, inner(request, context))
        )


class Details:
    def __init__(self, method: str) -> None:
        self.method = method
        self.invocation_metadata = ()


def answering(value: str) -> grpc.RpcMethodHandler:
    return grpc.unary_unary_rpc_method_handler(lambda request, context: value)


async def intercept(interceptor, method, handler):
    async def continuation(details):
        return handler

    return await interceptor.intercept_service(continuation, Details(method))


async def test_a_methods_handler_is_rewrapped_once_and_served_each_call():
    interceptor = Tagging()
    copy = answering("copied")
    served = [await intercept(interceptor, "/store/Copy", copy) for _ in range(3)]
    assert served[0] is served[1] is served[2]
    assert served[0].unary_unary(b"", None) == ("/store/Copy", "copied")
    fetched = await intercept(interceptor, "/store/Fetch", answering("fetched"))
    assert fetched.unary_unary(b"", None) == ("/store/Fetch", "fetched")
    assert interceptor.rewraps == ["/store/Copy", "/store/Fetch"]


async def test_a_method_given_another_handler_is_rewrapped_anew():
    interceptor = Tagging()
    await intercept(interceptor, "/store/Copy", answering("old"))
    served = await intercept(interceptor, "/store/Copy", answering("new"))
    assert served.unary_unary(b"", None) == ("/store/Copy", "new")
    assert interceptor.rewraps == ["/store/Copy", "/store/Copy"]


async def test_an_unknown_method_has_no_handler_and_is_not_kept():
    interceptor = Tagging()
    assert await intercept(interceptor, "/store/Nothing", None) is None
    assert interceptor.rewraps == []
