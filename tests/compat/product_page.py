"""The product page's Python examples for tasks, consume, receive and send, nearly verbatim.

One script, run by the official 0.2.0 client (`test_official_queues.py`) and by our SDK
(`tests/e2e/test_product_page.py`) against a real server: code written for one runs on the other.
It expects `asyncio`, `signal`, `AsyncRunstate`, `ARGS` (with `mailbox`) and `emit` in scope.
"""

PRODUCT_PAGE_EXAMPLES = """
        async def research_company(name):
            await asyncio.sleep(0.05)
            return {"company": name, "summary": f"{name} makes anvils"}

        async def main():
            rs = AsyncRunstate(holder="researcher-1")
            run = await rs.scopes.create()
            name = ARGS["mailbox"]

            await rs.mailboxes.ensure(name, mode="WORK")

            # Any number of planners can run this. They all get the same task.
            ticket = await run.mailbox(name).submit(
                {"company": "acme"},
                key="research:acme",
                subscriber_id="planner-7",
            )
            again = await run.mailbox(name).submit({"company": "acme"}, key="research:acme", subscriber_id="planner-8")

            stop = asyncio.Event()
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
            errors = []

            async def handle(data, delivery):
                report = await research_company(data["company"])
                await delivery.complete(result={"payload": report})

            def log_error(err, delivery):
                errors.append(f"attempt {delivery.attempt} failed: {err}")

            worker = asyncio.ensure_future(run.mailbox(name).consume(
                handle,
                concurrency=4,  # handlers running at once in this process
                lease_seconds=60,  # renewed while each handler runs
                stop_event=stop,  # stop taking work, drain, requeue the rest
                on_error=log_error,
            ))

            outcome = await ticket.result(timeout_ms=300_000)
            if outcome["state"] == "SUCCEEDED":
                print("report", outcome["outcome"])
            else:
                print(f"task ended {outcome['state']}: {outcome['reason']}")
            stop.set()
            await asyncio.wait_for(worker, 30)

            # Get a result back after a restart.
            view = await rs.scope(run.id).task(ticket.id).status()
            print(view["state"], view["attempt"], view.get("outcome"))

            # Plain messages.
            sent = await run.mailbox(name).send({"company": "acme"}, work_key="crawl:acme")
            print(sent["id"], sent["replay"])
            resent = await run.mailbox(name).send({"company": "acme"}, work_key="crawl:acme")

            # Receiving manually.
            delivery = await run.mailbox(name).receive()
            if delivery is not None:
                try:
                    await delivery.renew(120)  # extend before long work
                    report = await research_company(delivery.data["company"])
                    await delivery.complete(result={"payload": report})
                except Exception:
                    await delivery.retry()
                    raise
            empty = await run.mailbox(name).receive()
            emit(outcome=outcome, same_task=again.id == ticket.id, view=view, sent=sent, resent=resent,
                 delivered=delivery.data, attempt=delivery.attempt, empty=empty is None, errors=errors)
            await rs.aclose()

        asyncio.run(main())
        """


def check_product_page_result(result: dict) -> None:
    assert result["outcome"] == {
        "state": "SUCCEEDED",
        "outcome": {"company": "acme", "summary": "acme makes anvils"},
        "reason": None,
    }
    assert result["same_task"] is True
    assert result["view"]["state"] == "SUCCEEDED" and result["view"]["attempt"] == 1
    assert result["view"]["subscribers"] == ["planner-7", "planner-8"]
    assert result["sent"]["replay"] is False and result["resent"]["replay"] is True
    assert result["resent"]["id"] == result["sent"]["id"]
    assert result["delivered"] == {"company": "acme"} and result["attempt"] == 1
    assert result["empty"] is True and result["errors"] == []

