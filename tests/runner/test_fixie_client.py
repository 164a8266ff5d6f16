"""A client written for the real Fixie 1.0 SDK (fixieai==1.0.4, its own virtualenv) uses
the local stack unchanged: FIXIE_API_URL and FIXIE_API_KEY point it at us."""

import json
import os
import subprocess

CLIENT = '''
import json, sys
import fixieai

client = fixieai.FixieClient()
agents = sorted(client.get_agents())
session = client.create_session(sys.argv[1])
answer = session.query(sys.argv[2])
print(json.dumps({"agents": agents, "answer": answer}))
'''


def test_fixie_client_session_query_against_the_local_stack(live_stack, fixie_python, tmp_path):
    script = tmp_path / "client.py"
    script.write_text(CLIENT)
    env = {"PATH": os.environ["PATH"], "FIXIE_API_URL": live_stack["api_url"],
           "FIXIE_API_KEY": live_stack["api_key"], "HOME": str(tmp_path)}
    out = subprocess.run([str(fixie_python), str(script), "local/dice", "Roll 2d6"],
                         capture_output=True, text=True, check=False, env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert {"local/dice", "local/clock", "local/notes"} <= set(result["agents"])
    # The answer is the final response: the real roll of the dice agent's Func.
    assert result["answer"].startswith("You rolled ") and " = " in result["answer"]
    total = int(result["answer"].rstrip(".").rsplit("= ", 1)[1])
    dice = [int(x) for x in result["answer"].removeprefix("You rolled ").split(" = ")[0]
            .split(" + ")]
    assert len(dice) == 2 and all(1 <= d <= 6 for d in dice) and sum(dice) == total
